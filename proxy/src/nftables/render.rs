//! The whole ruleset as one pure function of what the API says, kept structured (chains, verdict
//! map elements, affinity sets) so that a sync can send the kernel only what changed. The
//! layout and names follow kube-proxy's nftables mode (`pkg/proxy/nftables/proxier.go`): one
//! table `ip kube-proxy`; Services are found through the verdict maps `service-ips`
//! (`ip . proto . port`) and `service-nodeports` (`proto . port`) instead of a linear list of
//! rules, which is what makes 10,000 Services cheap for the kernel and for `nft`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use sha2::{Digest, Sha256};

use crate::endpoints::{
    Endpoint, ServiceFacts, is_headless, port_endpoints, service_key, slices_by_service,
};
use crate::iptables::render::{MASQ_MARK, ProxyConfig, ProxyState};

/// Our table (family `ip`): everything the proxier owns lives in it.
pub const TABLE: &str = "kube-proxy";

pub const SERVICE_IPS: &str = "service-ips";
pub const SERVICE_NODEPORTS: &str = "service-nodeports";
pub const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
pub const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
pub const CLUSTER_IPS: &str = "cluster-ip-ports";
pub const HAIRPIN: &str = "hairpin";

/// Base chains: (name, type, hook, priority). Filtering runs before DNAT (priority dstnat-10)
/// so it sees the Service's address, as upstream.
pub const BASE_CHAINS: [(&str, &str, &str, i32); 6] = [
    ("filter-input", "filter", "input", -110),
    ("filter-forward", "filter", "forward", -110),
    ("filter-output", "filter", "output", -110),
    ("nat-prerouting", "nat", "prerouting", -100),
    ("nat-output", "nat", "output", -100),
    ("nat-postrouting", "nat", "postrouting", 100),
];

/// The verdict maps: (name, type).
pub const MAPS: [(&str, &str); 4] = [
    (
        NO_ENDPOINT_SERVICES,
        "ipv4_addr . inet_proto . inet_service : verdict",
    ),
    (NO_ENDPOINT_NODEPORTS, "inet_proto . inet_service : verdict"),
    (
        SERVICE_IPS,
        "ipv4_addr . inet_proto . inet_service : verdict",
    ),
    (SERVICE_NODEPORTS, "inet_proto . inet_service : verdict"),
];

/// Plain sets: (name, type). `cluster-ip-ports` holds the `ip . proto . port` of every cluster IP
/// with endpoints, so one rule in `services` marks traffic from outside the pod network for
/// masquerading (upstream writes that rule into each service chain). `hairpin` holds
/// `ip . ip` for every endpoint: after DNAT, a packet whose source is its own destination is an
/// endpoint reaching itself through its Service and is masqueraded in `masquerading`. Upstream
/// writes that rule into a chain per endpoint; the set lets the endpoints go without chains,
/// which more than halves the chains and rules `nft` must load and fetch at 10,000 Services.
pub const SETS: [(&str, &str); 2] = [
    (CLUSTER_IPS, "ipv4_addr . inet_proto . inet_service"),
    (HAIRPIN, "ipv4_addr . ipv4_addr"),
];

fn is_plain_set(name: &str) -> bool {
    SETS.iter().any(|(s, _)| *s == name)
}

/// Per-service chains carry a `/` in their names (`ns/name/proto/port`); static ones never do.
pub fn is_service_chain(chain: &str) -> bool {
    chain.contains('/')
}

/// `<first 8 base32 characters of sha256(name)>-<name>`, as upstream's `hashAndTruncate`: the
/// hash keeps chains of one Service that differ in a digit visually apart.
fn hashed(name: &str) -> String {
    let digest = Sha256::digest(name.as_bytes());
    let encoded = data_encoding::BASE32.encode(&digest);
    format!("{}-{name}", &encoded[..8])
}

/// `HASH-ns/name/proto/port`, the base of a service port's chain names.
pub fn service_base(ns: &str, name: &str, proto: &str, port_name: &str) -> String {
    hashed(&format!("{ns}/{name}/{proto}/{port_name}"))
}

/// `HASH-ns/name/proto/port__ip/port`, the base of an endpoint's chain and affinity set names.
pub fn endpoint_base(ns: &str, name: &str, proto: &str, port_name: &str, ep: &Endpoint) -> String {
    hashed(&format!(
        "{ns}/{name}/{proto}/{port_name}__{}/{}",
        ep.ip, ep.port
    ))
}

/// Everything in our table that depends on the API: regular chains with their rules (the
/// static chains too), the elements of each verdict map, and the affinity sets with their
/// timeouts. Base chains are in `chains` as well (their hooks are declared by the full sync).
/// `maps` holds the elements of the plain [`SETS`] too, with an empty value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NftRuleset {
    pub chains: BTreeMap<String, Vec<String>>,
    pub maps: BTreeMap<&'static str, BTreeMap<String, String>>,
    pub sets: BTreeMap<String, i32>,
}

impl NftRuleset {
    fn rule(&mut self, chain: &str, rule: impl Into<String>) {
        self.chain(chain).push(rule.into());
    }

    fn chain(&mut self, chain: &str) -> &mut Vec<String> {
        if !self.chains.contains_key(chain) {
            self.chains.insert(chain.to_string(), Vec::new());
        }
        self.chains.get_mut(chain).expect("just inserted")
    }

    fn element(&mut self, map: &'static str, key: String, verdict: String) {
        self.maps.entry(map).or_default().insert(key, verdict);
    }

    /// Adds another piece (one Service's rules). An element both already have keeps its first
    /// value, as the incremental [`Syncer`](super::Syncer) decides.
    pub fn merge(&mut self, piece: &NftRuleset) {
        self.add_structure(piece);
        for (map, elements) in &piece.maps {
            let into = self.maps.entry(map).or_default();
            for (k, v) in elements {
                into.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }

    /// Takes `piece`'s chains and affinity sets (not its elements).
    pub fn add_structure(&mut self, piece: &NftRuleset) {
        for (chain, rules) in &piece.chains {
            self.chains.insert(chain.clone(), rules.clone());
        }
        for (set, timeout) in &piece.sets {
            self.sets.insert(set.clone(), *timeout);
        }
    }

    /// (chains, rules, map elements).
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.chains.len(),
            self.chains.values().map(Vec::len).sum(),
            self.maps.values().map(BTreeMap::len).sum(),
        )
    }

    /// The complete ruleset as one `nft -f` transaction that replaces our table: creating it
    /// first makes the deletion succeed when it does not exist yet.
    pub fn to_script(&self) -> String {
        let mut out = String::with_capacity(self.size_hint());
        let t = format!("ip {TABLE}");
        let _ = writeln!(
            out,
            "add table {t} {{ comment \"rules for kube-proxy\" ; }}"
        );
        let _ = writeln!(out, "delete table {t}");
        let _ = writeln!(
            out,
            "add table {t} {{ comment \"rules for kube-proxy\" ; }}"
        );
        for (name, kind, hook, priority) in BASE_CHAINS {
            let _ = writeln!(
                out,
                "add chain {t} {name} {{ type {kind} hook {hook} priority {priority} ; }}"
            );
        }
        for (name, kind) in MAPS {
            let _ = writeln!(out, "add map {t} {name} {{ type {kind} ; }}");
        }
        for (name, kind) in SETS {
            let _ = writeln!(out, "add set {t} {name} {{ type {kind} ; }}");
        }
        for name in self.chains.keys() {
            if !BASE_CHAINS.iter().any(|b| b.0 == name) {
                let _ = writeln!(out, "add chain {t} {name}");
            }
        }
        for (name, timeout) in &self.sets {
            write_set(&mut out, name, *timeout);
        }
        for (chain, rules) in &self.chains {
            write_rules(&mut out, chain, rules);
        }
        for (map, elements) in &self.maps {
            write_elements(&mut out, "add", map, elements.iter());
        }
        out
    }

    fn size_hint(&self) -> usize {
        self.chains
            .iter()
            .map(|(c, r)| 40 + r.iter().map(|r| r.len() + c.len() + 30).sum::<usize>())
            .sum::<usize>()
            + self
                .maps
                .values()
                .flatten()
                .map(|(k, v)| k.len() + v.len() + 4)
                .sum::<usize>()
            + 4096
    }
}

fn write_set(out: &mut String, name: &str, timeout: i32) {
    let _ = writeln!(
        out,
        "add set ip {TABLE} {name} {{ type ipv4_addr ; flags dynamic,timeout ; timeout {timeout}s ; }}"
    );
}

fn write_rules(out: &mut String, chain: &str, rules: &[String]) {
    for rule in rules {
        let _ = writeln!(out, "add rule ip {TABLE} {chain} {rule}");
    }
}

/// One `add`/`delete element` command per map; `nft` takes a whole list at once.
/// The elements of `map` in `a` that `b` lacks or gives another value.
fn elements_not_in<'a>(
    a: &'a NftRuleset,
    b: &'a NftRuleset,
    map: &str,
) -> impl Iterator<Item = (&'a String, &'a String)> {
    let other = b.maps.get(map);
    a.maps
        .get(map)
        .into_iter()
        .flatten()
        .filter(move |(k, v)| other.and_then(|o| o.get(*k)) != Some(*v))
}

fn write_elements<'a>(
    out: &mut String,
    op: &str,
    map: &str,
    elements: impl Iterator<Item = (&'a String, &'a String)>,
) {
    let mut first = true;
    for (key, verdict) in elements {
        if first {
            let _ = write!(out, "{op} element ip {TABLE} {map} {{ ");
            first = false;
        } else {
            out.push_str(", ");
        }
        if op == "delete" || is_plain_set(map) {
            out.push_str(key);
        } else {
            let _ = write!(out, "{key} : {verdict}");
        }
    }
    if !first {
        out.push_str(" }\n");
    }
}

/// What a partial sync sends to get from `applied` (what the previous sync put in the kernel)
/// to `next`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    Unchanged,
    /// One `nft -f` transaction with only the differences.
    Partial(String),
    /// An affinity set's timeout changed, which a set cannot do in place.
    Full,
}

/// The differences as one transaction: new chains are added and changed ones flushed and
/// refilled; chains that disappeared are flushed and deleted; map elements that went or changed
/// their verdict are deleted and new or changed ones added; affinity sets come and go with
/// their endpoints. Everything else in the kernel is left alone. Stale chains are deleted in
/// the same transaction as the map elements pointing at them, which kernels from 6.2 accept
/// (upstream defers the deletion by a second for older kernels).
pub fn partial_script(applied: &NftRuleset, next: &NftRuleset) -> Plan {
    if next
        .sets
        .iter()
        .any(|(s, t)| applied.sets.get(s).is_some_and(|old| old != t))
    {
        return Plan::Full;
    }
    let t = format!("ip {TABLE}");
    let mut out = String::new();
    let new: Vec<&String> = next
        .chains
        .keys()
        .filter(|c| !applied.chains.contains_key(*c))
        .collect();
    let changed: Vec<(&String, &Vec<String>)> = next
        .chains
        .iter()
        .filter(|(c, r)| applied.chains.get(*c).is_some_and(|old| old != *r))
        .collect();
    let stale: Vec<&String> = applied
        .chains
        .keys()
        .filter(|c| !next.chains.contains_key(*c))
        .collect();
    for c in &new {
        let _ = writeln!(out, "add chain {t} {c}");
    }
    for c in changed.iter().map(|(c, _)| *c).chain(stale.iter().copied()) {
        let _ = writeln!(out, "flush chain {t} {c}");
    }
    for map in element_names() {
        write_elements(&mut out, "delete", map, elements_not_in(applied, next, map));
    }
    for c in &stale {
        let _ = writeln!(out, "delete chain {t} {c}");
    }
    for s in applied.sets.keys().filter(|s| !next.sets.contains_key(*s)) {
        let _ = writeln!(out, "delete set {t} {s}");
    }
    for (s, timeout) in next
        .sets
        .iter()
        .filter(|(s, _)| !applied.sets.contains_key(*s))
    {
        write_set(&mut out, s, *timeout);
    }
    for c in &new {
        write_rules(&mut out, c, &next.chains[*c]);
    }
    for (c, rules) in &changed {
        write_rules(&mut out, c, rules);
    }
    for map in element_names() {
        write_elements(&mut out, "add", map, elements_not_in(next, applied, map));
    }
    if out.is_empty() {
        Plan::Unchanged
    } else {
        Plan::Partial(out)
    }
}

/// The maps and plain sets, whose elements a partial sync adds and deletes.
fn element_names() -> impl Iterator<Item = &'static str> {
    MAPS.iter().map(|m| m.0).chain(SETS.iter().map(|s| s.0))
}

/// Renders our table for `state` as one full-sync `nft` script.
pub fn render(state: &ProxyState) -> String {
    render_ruleset(state).to_script()
}

/// Renders our table for `state`, structured: the static part and every Service's piece.
pub fn render_ruleset(state: &ProxyState) -> NftRuleset {
    let mut r = static_ruleset(&state.config);
    let slices = slices_by_service(&state.slices);
    for svc in &state.services {
        let (ns, name) = service_key(svc);
        let own = slices
            .get(&(ns.as_str(), name.as_str()))
            .map(Vec::as_slice)
            .unwrap_or_default();
        r.merge(&service_ruleset(&state.config, svc, own));
    }
    r
}

/// What does not depend on any Service: base and dispatch chains, the maps and sets (empty).
pub fn static_ruleset(config: &ProxyConfig) -> NftRuleset {
    let mut r = NftRuleset::default();
    for name in element_names() {
        r.maps.insert(name, BTreeMap::new());
    }
    for chain in ["filter-input", "filter-forward", "filter-output"] {
        r.rule(chain, "ct state new jump endpoints-check");
    }
    r.rule("nat-output", "jump services");
    r.rule("nat-prerouting", "jump services");
    r.rule("nat-postrouting", "jump masquerading");
    r.rule(
        "endpoints-check",
        format!("ip daddr . meta l4proto . th dport vmap @{NO_ENDPOINT_SERVICES}"),
    );
    // NodePorts answer on every local address, 127.0.0.1 included as in the iptables mode
    // (upstream's nftables mode leaves localhost out).
    r.rule(
        "endpoints-check",
        format!("fib daddr type local meta l4proto . th dport vmap @{NO_ENDPOINT_NODEPORTS}"),
    );
    r.rule("reject-chain", "reject");
    // Traffic to a cluster IP from outside the pod network is masqueraded so the reply comes
    // back through this node.
    let cluster_dest = format!("ip daddr . meta l4proto . th dport @{CLUSTER_IPS}");
    if config.masquerade_all {
        r.rule(
            "services",
            format!("{cluster_dest} jump mark-for-masquerade"),
        );
    } else if let Some(cidr) = &config.cluster_cidr {
        r.rule(
            "services",
            format!("ip saddr != {cidr} {cluster_dest} jump mark-for-masquerade"),
        );
    }
    r.rule(
        "services",
        format!("ip daddr . meta l4proto . th dport vmap @{SERVICE_IPS}"),
    );
    r.rule(
        "services",
        format!("fib daddr type local meta l4proto . th dport vmap @{SERVICE_NODEPORTS}"),
    );
    r.rule(
        "mark-for-masquerade",
        format!("mark set mark or {MASQ_MARK}"),
    );
    // Hairpin: an endpoint reaching itself through its Service must be masqueraded, or it
    // would answer itself directly.
    r.rule(
        "masquerading",
        format!("ct status dnat ip saddr . ip daddr @{HAIRPIN} jump mark-for-masquerade"),
    );
    r.rule("masquerading", format!("mark and {MASQ_MARK} == 0 return"));
    r.rule("masquerading", format!("mark set mark xor {MASQ_MARK}"));
    r.rule("masquerading", "masquerade fully-random");
    r
}

/// One Service's piece of the table: its chains, map and set elements and affinity sets
/// (nothing for a headless Service). `slices` are its EndpointSlices.
pub fn service_ruleset(
    config: &ProxyConfig,
    svc: &Service,
    slices: &[&EndpointSlice],
) -> NftRuleset {
    let mut r = NftRuleset::default();
    if !is_headless(svc) {
        service_rules(config, svc, slices, &mut r);
    }
    r
}

fn service_rules(
    config: &ProxyConfig,
    svc: &Service,
    slices: &[&EndpointSlice],
    r: &mut NftRuleset,
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
        let svc_port = port.port;
        let node_port = port.node_port.filter(|_| node_port_type);
        let endpoints = port_endpoints(slices, port_name, protocol);
        let base = service_base(&ns, &name, &proto, port_name);
        let cluster_chain = format!("service-{base}");
        let external_chain = format!("external-{base}");
        let local_chain = format!("local-{base}");
        let external_keys: Vec<String> = external_ips
            .iter()
            .chain(&lb_ips)
            .map(|ip| format!("{ip} . {proto} . {svc_port}"))
            .collect();
        let node_port_key = node_port.map(|np| format!("{proto} . {np}"));

        if endpoints.is_empty() {
            let reject = "goto reject-chain".to_string();
            for key in
                std::iter::once(format!("{cluster_ip} . {proto} . {svc_port}")).chain(external_keys)
            {
                r.element(NO_ENDPOINT_SERVICES, key, reject.clone());
            }
            if let Some(key) = node_port_key {
                r.element(NO_ENDPOINT_NODEPORTS, key, reject);
            }
            continue;
        }

        let cluster_key = format!("{cluster_ip} . {proto} . {svc_port}");
        r.element(
            SERVICE_IPS,
            cluster_key.clone(),
            format!("goto {cluster_chain}"),
        );
        r.element(CLUSTER_IPS, cluster_key, String::new());
        for ep in &endpoints {
            r.element(HAIRPIN, format!("{} . {}", ep.ip, ep.ip), String::new());
        }
        balance(
            r,
            &cluster_chain,
            &ns,
            &name,
            &proto,
            port_name,
            &endpoints,
            affinity_timeout,
        );

        if !external_keys.is_empty() || node_port_key.is_some() {
            let local: Vec<Endpoint> = endpoints
                .iter()
                .filter(|e| e.node_name.as_deref() == Some(config.hostname.as_str()))
                .cloned()
                .collect();
            for key in &external_keys {
                r.element(SERVICE_IPS, key.clone(), format!("goto {external_chain}"));
            }
            if let Some(key) = &node_port_key {
                r.element(
                    SERVICE_NODEPORTS,
                    key.clone(),
                    format!("goto {external_chain}"),
                );
            }
            if !external_local {
                r.rule(&external_chain, "jump mark-for-masquerade");
                r.rule(&external_chain, format!("goto {cluster_chain}"));
            } else {
                // Local policy keeps the client's address: only endpoints on this node, except
                // that pods and the node itself may still use any endpoint.
                if let Some(cidr) = &config.cluster_cidr {
                    r.rule(
                        &external_chain,
                        format!("ip saddr {cidr} goto {cluster_chain}"),
                    );
                }
                r.rule(
                    &external_chain,
                    "fib saddr type local jump mark-for-masquerade",
                );
                r.rule(
                    &external_chain,
                    format!("fib saddr type local goto {cluster_chain}"),
                );
                if local.is_empty() {
                    for key in &external_keys {
                        r.element(NO_ENDPOINT_SERVICES, key.clone(), "drop".into());
                    }
                    if let Some(key) = &node_port_key {
                        r.element(NO_ENDPOINT_NODEPORTS, key.clone(), "drop".into());
                    }
                } else {
                    r.rule(&external_chain, format!("goto {local_chain}"));
                    balance(
                        r,
                        &local_chain,
                        &ns,
                        &name,
                        &proto,
                        port_name,
                        &local,
                        affinity_timeout,
                    );
                }
            }
        }

        // Only session affinity needs a chain per endpoint: it remembers the client there.
        if let Some(timeout) = affinity_timeout {
            for ep in &endpoints {
                let base = endpoint_base(&ns, &name, &proto, port_name, ep);
                let set = format!("affinity-{base}");
                let chain = format!("endpoint-{base}");
                r.rule(&chain, format!("update @{set} {{ ip saddr }}"));
                r.rule(&chain, dnat(&proto, ep));
                r.sets.insert(set, timeout);
            }
        }
    }
}

fn dnat(proto: &str, ep: &Endpoint) -> String {
    format!("meta l4proto {proto} dnat to {}", ep.addr())
}

/// The jumps from a service chain to its endpoints: sticky ones first (a client seen within
/// the timeout goes where it went before), then a uniformly random pick where the i-th of n
/// endpoints is taken with probability 1/(n-i), as the iptables mode does. Upstream writes one
/// `numgen random mod n vmap { .. }` instead, but each such rule is an anonymous set, and the
/// kernel names a new set by scanning all sets of the table: measured here, 10,000 of them made
/// one `nft -f` take 28 s instead of under 2 s.
#[allow(clippy::too_many_arguments)]
fn balance(
    r: &mut NftRuleset,
    chain: &str,
    ns: &str,
    name: &str,
    proto: &str,
    port_name: &str,
    endpoints: &[Endpoint],
    affinity_timeout: Option<i32>,
) {
    // Without affinity the pick DNATs right away (a NAT statement ends the chain).
    let targets: Vec<String> = endpoints
        .iter()
        .map(|ep| match affinity_timeout {
            Some(_) => format!(
                "goto endpoint-{}",
                endpoint_base(ns, name, proto, port_name, ep)
            ),
            None => dnat(proto, ep),
        })
        .collect();
    if affinity_timeout.is_some() {
        for ep in endpoints {
            let base = endpoint_base(ns, name, proto, port_name, ep);
            r.rule(
                chain,
                format!("ip saddr @affinity-{base} goto endpoint-{base}"),
            );
        }
    }
    let n = targets.len();
    for (i, target) in targets.iter().enumerate() {
        if i + 1 < n {
            r.rule(chain, format!("numgen random mod {} == 0 {target}", n - i));
        } else {
            r.rule(chain, target.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iptables::render::tests::web;

    #[test]
    fn names_match_upstream() {
        // Values from upstream's nftables proxier tests.
        assert_eq!(
            service_base("ns1", "svc1", "tcp", "p80"),
            "ULMVA6XW-ns1/svc1/tcp/p80"
        );
        let ep = Endpoint {
            ip: "10.180.0.1".into(),
            port: 80,
            node_name: None,
            hostname: None,
        };
        assert_eq!(
            endpoint_base("ns1", "svc1", "tcp", "p80", &ep),
            "5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"
        );
    }

    fn partial(a: &NftRuleset, b: &NftRuleset) -> String {
        match partial_script(a, b) {
            Plan::Partial(s) => s,
            other => panic!("expected a partial script, got {other:?}"),
        }
    }

    #[test]
    fn partial_script_sends_only_what_changed() {
        let one = render_ruleset(&web(&["10.244.0.2"]));
        assert_eq!(partial_script(&one, &one.clone()), Plan::Unchanged);

        let svc = "service-".to_string() + &hashed("default/web/tcp/");

        // A second endpoint: the service chain is flushed and refilled and the endpoint's
        // hairpin pair added; no other element and no other Service's chain is touched.
        let two = render_ruleset(&web(&["10.244.0.2", "10.244.0.3"]));
        let data = partial(&one, &two);
        assert_eq!(
            data,
            format!(
                "flush chain ip kube-proxy {svc}\n\
                 add rule ip kube-proxy {svc} numgen random mod 2 == 0 meta l4proto tcp dnat to 10.244.0.2:8080\n\
                 add rule ip kube-proxy {svc} meta l4proto tcp dnat to 10.244.0.3:8080\n\
                 add element ip kube-proxy hairpin {{ 10.244.0.3 . 10.244.0.3 }}\n"
            )
        );
        // What the kernel gets is what a full sync would have written for those chains.
        let full = two.to_script();
        for line in data.lines().filter(|l| l.starts_with("add rule")) {
            assert!(full.contains(line), "{line}");
        }

        // Back to one: the chain is refilled and the removed endpoint's pair deleted.
        let data = partial(&two, &one);
        assert!(
            data.contains("delete element ip kube-proxy hairpin { 10.244.0.3 . 10.244.0.3 }\n"),
            "{data}"
        );
        assert!(!data.contains("chain ip kube-proxy endpoint-"), "{data}");

        // No endpoints: the cluster IP moves from service-ips to no-endpoint-services, and
        // every chain of the Service goes.
        let none = render_ruleset(&web(&[]));
        let data = partial(&one, &none);
        assert!(
            data.contains("delete element ip kube-proxy service-ips { 10.96.0.10 . tcp . 80 }\n"),
            "{data}"
        );
        assert!(
            data.contains(
                "add element ip kube-proxy no-endpoint-services { 10.96.0.10 . tcp . 80 : goto reject-chain }\n"
            ),
            "{data}"
        );
        assert!(
            data.contains(&format!("delete chain ip kube-proxy {svc}\n")),
            "{data}"
        );
        // Elements go before the chains they point at.
        assert!(
            data.find("delete element").unwrap() < data.find("delete chain").unwrap(),
            "{data}"
        );
        assert!(!data.contains("default/other"), "{data}");

        // And back: the chains return and the elements swap again.
        let data = partial(&none, &one);
        assert!(
            data.contains(&format!("add chain ip kube-proxy {svc}\n")),
            "{data}"
        );
        assert!(
            data.contains(&format!(
                "add element ip kube-proxy service-ips {{ 10.96.0.10 . tcp . 80 : goto {svc} }}\n"
            )),
            "{data}"
        );
        assert!(
            data.contains(
                "delete element ip kube-proxy no-endpoint-services { 10.96.0.10 . tcp . 80 }\n"
            ),
            "{data}"
        );
    }

    #[test]
    fn a_changed_affinity_timeout_needs_a_full_sync() {
        let mut a = NftRuleset::default();
        a.sets.insert("affinity-x".into(), 10);
        let mut b = a.clone();
        b.sets.insert("affinity-x".into(), 20);
        assert_eq!(partial_script(&a, &b), Plan::Full);
    }
}
