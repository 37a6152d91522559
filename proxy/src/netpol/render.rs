//! The pods' rules as kernel rules, in either backend's language. Both have the same shape:
//! forwarded packets of connections already allowed pass; a packet from an isolated pod goes
//! through that pod's egress chain, one to an isolated pod through its ingress chain; a chain
//! returns on the first allow and drops at its end. Only forwarded traffic is filtered, so
//! the node itself (kubelet probes, cluster DNS on the node) always reaches its pods and they
//! it, as upstream's implementations allow.

use super::model::{Allow, PodRules};
use crate::iptables::render::hashed;

/// The chain FORWARD jumps to, in the iptables backend's filter table.
pub const IPTABLES_CHAIN: &str = "MK8S-NETPOL";
/// Prefixes of the per-pod chains (the prefix and 16 hash characters fit iptables' 28).
pub const IPTABLES_PREFIXES: &[&str] = &["MK8S-NPI-", "MK8S-NPE-"];
/// The jump from FORWARD, first in the chain: kube-proxy's KUBE-FORWARD accepts some new
/// connections, which must have been through the policies before.
pub const IPTABLES_JUMP: &[&str] = &[
    "-m",
    "comment",
    "--comment",
    "minik8s network policies",
    "-j",
    IPTABLES_CHAIN,
];
/// The nftables backend's table (family `ip`).
pub const NFT_TABLE: &str = "minik8s-netpol";

fn chain_names(pod: &PodRules) -> (String, String) {
    (
        hashed(IPTABLES_PREFIXES[0], &pod.key),
        hashed(IPTABLES_PREFIXES[1], &pod.key),
    )
}

/// `iptables-restore --noflush` input for the filter table: our chains, each declared (so
/// flushed) and filled, and the `stale` chains of ours nothing needs any more removed.
pub fn iptables_restore(pods: &[PodRules], stale: &[String]) -> String {
    let mut chains = vec![IPTABLES_CHAIN.to_string()];
    let mut rules = vec![format!(
        "-A {IPTABLES_CHAIN} -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN"
    )];
    let mut pod_chains = Vec::new();
    // Every egress check before any ingress check: a packet between two isolated pods of this
    // node passes both.
    for pod in pods.iter().filter(|p| p.egress.is_some()) {
        let (_, chain) = chain_names(pod);
        rules.push(format!(
            "-A {IPTABLES_CHAIN} -s {}/32 -m comment --comment \"{} egress\" -j {chain}",
            pod.ip, pod.key
        ));
        pod_chains.push((chain, pod.egress.as_deref().unwrap_or_default(), "-d", pod));
    }
    for pod in pods.iter().filter(|p| p.ingress.is_some()) {
        let (chain, _) = chain_names(pod);
        rules.push(format!(
            "-A {IPTABLES_CHAIN} -d {}/32 -m comment --comment \"{} ingress\" -j {chain}",
            pod.ip, pod.key
        ));
        pod_chains.push((chain, pod.ingress.as_deref().unwrap_or_default(), "-s", pod));
    }
    for (chain, allows, peer_flag, pod) in &pod_chains {
        chains.push(chain.clone());
        for allow in *allows {
            rules.push(format!(
                "-A {chain}{} -j RETURN",
                iptables_match(allow, peer_flag)
            ));
        }
        rules.push(format!(
            "-A {chain} -m comment --comment \"{} not allowed by its policies\" -j DROP",
            pod.key
        ));
    }
    let mut out = String::from("*filter\n");
    for chain in chains.iter().chain(stale) {
        out.push_str(&format!(":{chain} - [0:0]\n"));
    }
    for rule in rules {
        out.push_str(&rule);
        out.push('\n');
    }
    for chain in stale {
        out.push_str(&format!("-X {chain}\n"));
    }
    out.push_str("COMMIT\n");
    out
}

fn iptables_match(allow: &Allow, peer_flag: &str) -> String {
    let mut m = String::new();
    if let Some(peer) = allow.peer {
        m.push_str(&format!(" {peer_flag} {peer}"));
    }
    if let Some(port) = allow.port {
        let proto = port.protocol.as_str();
        m.push_str(&format!(" -p {proto}"));
        if let Some((from, to)) = port.ports {
            m.push_str(&format!(" -m {proto} --dport {from}"));
            if to != from {
                m.push_str(&format!(":{to}"));
            }
        }
    }
    m
}

/// One `nft -f` transaction replacing our table whole.
pub fn nft_script(pods: &[PodRules]) -> String {
    let t = NFT_TABLE;
    let mut out = format!("add table ip {t}\ndelete table ip {t}\ntable ip {t} {{\n");
    out.push_str(
        "\tchain forward {\n\t\ttype filter hook forward priority filter; policy accept;\n",
    );
    out.push_str("\t\tct state established,related accept\n");
    let mut pod_chains = Vec::new();
    for pod in pods.iter().filter(|p| p.egress.is_some()) {
        let chain = format!(
            "egress-{}",
            &chain_names(pod).1[IPTABLES_PREFIXES[1].len()..]
        );
        out.push_str(&format!(
            "\t\tip saddr {} jump {chain} comment \"{} egress\"\n",
            pod.ip, pod.key
        ));
        pod_chains.push((chain, pod.egress.as_deref().unwrap_or_default(), "daddr"));
    }
    for pod in pods.iter().filter(|p| p.ingress.is_some()) {
        let chain = format!(
            "ingress-{}",
            &chain_names(pod).0[IPTABLES_PREFIXES[0].len()..]
        );
        out.push_str(&format!(
            "\t\tip daddr {} jump {chain} comment \"{} ingress\"\n",
            pod.ip, pod.key
        ));
        pod_chains.push((chain, pod.ingress.as_deref().unwrap_or_default(), "saddr"));
    }
    out.push_str("\t}\n");
    for (chain, allows, peer_field) in pod_chains {
        out.push_str(&format!("\tchain {chain} {{\n"));
        for allow in allows {
            out.push_str(&format!("\t\t{}return\n", nft_match(allow, peer_field)));
        }
        out.push_str("\t\tdrop\n\t}\n");
    }
    out.push_str("}\n");
    out
}

fn nft_match(allow: &Allow, peer_field: &str) -> String {
    let mut m = String::new();
    if let Some(peer) = allow.peer {
        m.push_str(&format!("ip {peer_field} {peer} "));
    }
    if let Some(port) = allow.port {
        let proto = port.protocol.as_str();
        match port.ports {
            Some((from, to)) if from == to => m.push_str(&format!("{proto} dport {from} ")),
            Some((from, to)) => m.push_str(&format!("{proto} dport {from}-{to} ")),
            None => m.push_str(&format!("meta l4proto {proto} ")),
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netpol::model::{Cidr, PortMatch, Protocol};

    fn pods() -> Vec<PodRules> {
        let web_port = PortMatch {
            protocol: Protocol::Tcp,
            ports: Some((80, 80)),
        };
        vec![
            PodRules {
                key: "a/db".into(),
                ip: "10.244.0.3".parse().unwrap(),
                ingress: Some(vec![]),
                egress: None,
            },
            PodRules {
                key: "a/web".into(),
                ip: "10.244.0.2".parse().unwrap(),
                ingress: Some(vec![Allow {
                    peer: Cidr::parse("10.244.1.0/24"),
                    port: Some(web_port),
                }]),
                egress: Some(vec![Allow {
                    peer: None,
                    port: Some(PortMatch {
                        protocol: Protocol::Udp,
                        ports: Some((53, 60)),
                    }),
                }]),
            },
        ]
    }

    #[test]
    fn iptables_rules_check_egress_then_ingress_and_drop_the_rest() {
        let out = iptables_restore(&pods(), &["MK8S-NPI-OLD".into()]);
        let web_in = hashed("MK8S-NPI-", "a/web");
        let web_out = hashed("MK8S-NPE-", "a/web");
        let lines: Vec<&str> = out.lines().collect();
        let at = |needle: &str| {
            lines
                .iter()
                .position(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("no {needle:?} in\n{out}"))
        };
        assert!(at("--ctstate RELATED,ESTABLISHED -j RETURN") < at("-s 10.244.0.2/32"));
        assert!(
            at(&format!(
                "-s 10.244.0.2/32 -m comment --comment \"a/web egress\" -j {web_out}"
            )) < at("-d 10.244.0.3/32")
        );
        assert!(lines.contains(
            &format!("-A {web_in} -s 10.244.1.0/24 -p tcp -m tcp --dport 80 -j RETURN").as_str()
        ));
        assert!(
            lines.contains(&format!("-A {web_out} -p udp -m udp --dport 53:60 -j RETURN").as_str())
        );
        assert!(
            lines.contains(
                &format!(
                    "-A {web_in} -m comment --comment \"a/web not allowed by its policies\" -j DROP"
                )
                .as_str()
            )
        );
        assert!(lines.contains(&":MK8S-NPI-OLD - [0:0]"));
        assert_eq!(lines[lines.len() - 2], "-X MK8S-NPI-OLD");
        assert!(web_in.len() <= 28);
    }

    #[test]
    fn nft_script_replaces_the_table_with_the_same_decisions() {
        let out = nft_script(&pods());
        assert!(out.starts_with("add table ip minik8s-netpol\ndelete table ip minik8s-netpol\n"));
        assert!(
            out.contains("ip saddr 10.244.1.0/24 tcp dport 80 return"),
            "{out}"
        );
        assert!(out.contains("\t\tudp dport 53-60 return"), "{out}");
        assert_eq!(out.matches("\t\tdrop\n").count(), 3);
        let egress = out.find("ip saddr 10.244.0.2 jump egress-").unwrap();
        assert!(egress < out.find("ip daddr 10.244.0.3 jump ingress-").unwrap());
    }
}
