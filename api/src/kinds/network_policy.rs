//! networking.k8s.io NetworkPolicies. The server only stores them (enforcing them is a network
//! plugin's job), so what matters here is that it accepts and defaults exactly what upstream
//! does: plugins read `policyTypes` and port protocols as the API server left them.

use std::net::IpAddr;

use jiff::Timestamp;
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, format_label_selector, name, string, text};
use crate::validation::{ErrorKind, Errors, FieldError, Path, validate_label_selector};

const PROTOCOLS: &[&str] = &["TCP", "UDP", "SCTP"];
const POLICY_TYPES: &[&str] = &["Ingress", "Egress"];

impl Kind for NetworkPolicy {
    const COLUMNS: &'static [Column] = NETWORK_POLICY_COLUMNS;

    fn spec_changed(&self, old: &Self) -> Option<bool> {
        Some(self.spec != old.spec)
    }

    fn default_fields(&mut self) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        let rules = spec.ingress.iter_mut().flatten().map(|r| &mut r.ports);
        let egress = spec.egress.iter_mut().flatten().map(|r| &mut r.ports);
        for port in rules.chain(egress).flatten().flatten() {
            port.protocol.get_or_insert_with(|| "TCP".into());
        }
        if spec.policy_types.as_ref().is_none_or(|t| t.is_empty()) {
            let mut types = vec!["Ingress".to_string()];
            if spec.egress.as_ref().is_some_and(|e| !e.is_empty()) {
                types.push("Egress".into());
            }
            spec.policy_types = Some(types);
        }
    }

    fn validate(&self, errs: &mut Errors) {
        let sp = Path::new("spec");
        let spec = self.spec.clone().unwrap_or_default();
        validate_label_selector(
            spec.pod_selector
                .as_ref()
                .unwrap_or(&LabelSelector::default()),
            &sp.child("podSelector"),
            errs,
        );
        for (i, rule) in spec.ingress.iter().flatten().enumerate() {
            let rp = sp.child("ingress").index(i);
            for (j, port) in rule.ports.iter().flatten().enumerate() {
                validate_port(port, &rp.child("ports").index(j), errs);
            }
            for (j, peer) in rule.from.iter().flatten().enumerate() {
                validate_peer(peer, &rp.child("from").index(j), errs);
            }
        }
        for (i, rule) in spec.egress.iter().flatten().enumerate() {
            let rp = sp.child("egress").index(i);
            for (j, port) in rule.ports.iter().flatten().enumerate() {
                validate_port(port, &rp.child("ports").index(j), errs);
            }
            for (j, peer) in rule.to.iter().flatten().enumerate() {
                validate_peer(peer, &rp.child("to").index(j), errs);
            }
        }
        let types = spec.policy_types.unwrap_or_default();
        if types.len() > POLICY_TYPES.len() {
            errs.push(FieldError::new(
                ErrorKind::Invalid,
                &sp.child("policyTypes"),
                Some(go_string_slice(&types)),
                "may not specify more than two policyTypes",
            ));
            return;
        }
        for (i, t) in types.iter().enumerate() {
            if !POLICY_TYPES.contains(&t.as_str()) {
                errs.push(FieldError::not_supported(
                    &sp.child("policyTypes").index(i),
                    t,
                    POLICY_TYPES,
                ));
            }
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(network_policy_cells(self, now))
    }
}

fn validate_port(port: &NetworkPolicyPort, p: &Path, errs: &mut Errors) {
    if let Some(proto) = &port.protocol
        && !PROTOCOLS.contains(&proto.as_str())
    {
        errs.push(FieldError::not_supported(
            &p.child("protocol"),
            proto,
            PROTOCOLS,
        ));
    }
    match &port.port {
        Some(IntOrString::Int(n)) => {
            if !(1..=65535).contains(n) {
                errs.push(FieldError::invalid(&p.child("port"), n, PORT_RANGE));
            }
            if let Some(end) = port.end_port {
                if end < *n {
                    // Upstream reports the start port as the bad value.
                    errs.push(FieldError::invalid(
                        &p.child("endPort"),
                        n,
                        "must be greater than or equal to `port`",
                    ));
                }
                if !(1..=65535).contains(&end) {
                    errs.push(FieldError::invalid(&p.child("endPort"), end, PORT_RANGE));
                }
            }
        }
        Some(IntOrString::String(name)) => {
            if let Some(end) = port.end_port {
                errs.push(FieldError::invalid(
                    &p.child("endPort"),
                    end,
                    "may not be specified when `port` is non-numeric",
                ));
            }
            for e in port_name_errors(name) {
                errs.push(FieldError::invalid(&p.child("port"), name, e));
            }
        }
        None => {
            if let Some(end) = port.end_port {
                errs.push(FieldError::invalid(
                    &p.child("endPort"),
                    end,
                    "may not be specified when `port` is not specified",
                ));
            }
        }
    }
}

const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";

/// Upstream's `IsValidPortName` (an IANA service name), every problem it reports.
fn port_name_errors(name: &str) -> Vec<&'static str> {
    let mut errs = Vec::new();
    if name.len() > 15 {
        errs.push("must be no more than 15 characters");
    }
    let charset = !name.is_empty()
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
    if !charset {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    } else if !name.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)");
    }
    if name.contains("--") {
        errs.push("must not contain consecutive hyphens (--)");
    }
    if name.starts_with('-') || name.ends_with('-') {
        errs.push("must not begin or end with a hyphen (-)");
    }
    errs
}

fn validate_peer(peer: &NetworkPolicyPeer, p: &Path, errs: &mut Errors) {
    let mut peers = 0;
    if let Some(sel) = &peer.pod_selector {
        peers += 1;
        validate_label_selector(sel, &p.child("podSelector"), errs);
    }
    if let Some(sel) = &peer.namespace_selector {
        peers += 1;
        validate_label_selector(sel, &p.child("namespaceSelector"), errs);
    }
    if let Some(block) = &peer.ip_block {
        peers += 1;
        validate_ip_block(block, &p.child("ipBlock"), errs);
    }
    if peers == 0 {
        errs.push(FieldError::required(p, "must specify a peer"));
    } else if peers > 1 && peer.ip_block.is_some() {
        errs.push(FieldError::forbidden(
            p,
            "may not specify both ipBlock and another peer",
        ));
    }
}

const CIDR_MSG: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";

fn validate_ip_block(block: &IPBlock, p: &Path, errs: &mut Errors) {
    if block.cidr.is_empty() {
        errs.push(FieldError::required(&p.child("cidr"), ""));
        return;
    }
    let Some(cidr) = parse_cidr(&block.cidr) else {
        errs.push(FieldError::invalid(&p.child("cidr"), &block.cidr, CIDR_MSG));
        return;
    };
    for (i, except) in block.except.iter().flatten().enumerate() {
        let ep = p.child("except").index(i);
        let Some(ex) = parse_cidr(except) else {
            errs.push(FieldError::invalid(&ep, except, CIDR_MSG));
            continue;
        };
        if !cidr.contains(ex.network) || cidr.prefix >= ex.prefix {
            errs.push(FieldError::invalid(
                &ep,
                except,
                "must be a strict subset of `cidr`",
            ));
        }
    }
}

/// A parsed CIDR: its network address (host bits cleared) and prefix length.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                mask(u32::from(a).into(), 32, self.prefix) == u128::from(u32::from(n))
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => mask(a.into(), 128, self.prefix) == u128::from(n),
            _ => false,
        }
    }
}

fn mask(bits: u128, width: u8, prefix: u8) -> u128 {
    if prefix == 0 {
        return 0;
    }
    let keep = u128::MAX << (width - prefix);
    bits & keep
        & if width == 32 {
            u32::MAX.into()
        } else {
            u128::MAX
        }
}

fn parse_cidr(s: &str) -> Option<Cidr> {
    let (ip, len) = s.split_once('/')?;
    if len.is_empty() || !len.bytes().all(|c| c.is_ascii_digit()) || len.len() > 3 {
        return None;
    }
    let prefix: u8 = len.parse().ok()?;
    let network = match ip.parse::<IpAddr>().ok()? {
        IpAddr::V4(a) if prefix <= 32 => {
            IpAddr::V4((mask(u32::from(a).into(), 32, prefix) as u32).into())
        }
        IpAddr::V6(a) if prefix <= 128 => IpAddr::V6(mask(a.into(), 128, prefix).into()),
        _ => return None,
    };
    Some(Cidr { network, prefix })
}

/// A Go `[]string` as `%#v` prints it in a field error.
fn go_string_slice(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const NETWORK_POLICY_COLUMNS: &[Column] = &[
    NAME,
    string("Pod-Selector", doc::NETWORK_POLICY_SPEC_POD_SELECTOR),
    AGE,
];

fn network_policy_cells(np: &NetworkPolicy, now: Timestamp) -> Vec<Value> {
    // A missing podSelector is upstream's zero-value selector: it selects everything.
    let selector = np
        .spec
        .as_ref()
        .and_then(|s| s.pod_selector.clone())
        .unwrap_or_default();
    vec![
        name(&np.metadata),
        text(format_label_selector(Some(&selector))),
        age(&np.metadata, now),
    ]
}

mod doc {
    pub const NETWORK_POLICY_SPEC_POD_SELECTOR: &str = "Selects the pods to which this NetworkPolicy object applies.  The array of ingress rules is applied to any pods selected by this field. Multiple network policies can select the same set of pods.  In this case, the ingress rules for each are combined additively. This field is NOT optional and follows standard label selector semantics. An empty podSelector matches all pods in this namespace.";
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::testing::*;

    fn policy(spec: Value) -> NetworkPolicy {
        serde_json::from_value(
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "np", "namespace": "default"}, "spec": spec}),
        )
        .unwrap()
    }

    fn errors(spec: Value) -> Vec<String> {
        let mut np = policy(spec);
        np.default_fields();
        let mut errs = Vec::new();
        np.validate(&mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn defaults_as_upstream() {
        let mut np = policy(json!({"podSelector": {}, "ingress": [{"ports": [{"port": 80}]}]}));
        np.default_fields();
        let spec = np.spec.unwrap();
        assert_eq!(spec.policy_types.unwrap(), ["Ingress"]);
        let port = &spec.ingress.unwrap()[0].ports.clone().unwrap()[0];
        assert_eq!(port.protocol.as_deref(), Some("TCP"));

        let mut np = policy(json!({"egress": [{}]}));
        np.default_fields();
        assert_eq!(
            np.spec.unwrap().policy_types.unwrap(),
            ["Ingress", "Egress"]
        );
        let mut np = policy(json!({"egress": [{}], "policyTypes": ["Egress"]}));
        np.default_fields();
        assert_eq!(np.spec.unwrap().policy_types.unwrap(), ["Egress"]);
    }

    #[test]
    fn ports() {
        let port = |p: Value| errors(json!({"ingress": [{"ports": [p]}]}));
        assert!(port(json!({"port": 80, "endPort": 90})).is_empty());
        assert!(port(json!({"port": "http", "protocol": "SCTP"})).is_empty());
        assert_eq!(
            port(json!({"protocol": "ICMP"})),
            [
                "spec.ingress[0].ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"TCP\", \"UDP\", \"SCTP\""
            ]
        );
        assert_eq!(
            port(json!({"port": 0})),
            [
                "spec.ingress[0].ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive"
            ]
        );
        assert_eq!(
            port(json!({"port": 90, "endPort": 80})),
            [
                "spec.ingress[0].ports[0].endPort: Invalid value: 90: must be greater than or equal to `port`"
            ]
        );
        assert_eq!(
            port(json!({"port": "http", "endPort": 80})),
            [
                "spec.ingress[0].ports[0].endPort: Invalid value: 80: may not be specified when `port` is non-numeric"
            ]
        );
        assert_eq!(
            port(json!({"endPort": 80})),
            [
                "spec.ingress[0].ports[0].endPort: Invalid value: 80: may not be specified when `port` is not specified"
            ]
        );
        assert_eq!(
            port(json!({"port": "Web--"})),
            [
                "spec.ingress[0].ports[0].port: Invalid value: \"Web--\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                "spec.ingress[0].ports[0].port: Invalid value: \"Web--\": must not contain consecutive hyphens (--)",
                "spec.ingress[0].ports[0].port: Invalid value: \"Web--\": must not begin or end with a hyphen (-)"
            ]
        );
    }

    #[test]
    fn peers() {
        let peer = |p: Value| errors(json!({"egress": [{"to": [p]}]}));
        assert!(
            peer(json!({"podSelector": {}, "namespaceSelector": {"matchLabels": {"a": "b"}}}))
                .is_empty()
        );
        assert!(
            peer(json!({"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}})).is_empty()
        );
        assert_eq!(
            peer(json!({})),
            ["spec.egress[0].to[0]: Required value: must specify a peer"]
        );
        assert_eq!(
            peer(json!({"podSelector": {}, "ipBlock": {"cidr": "10.0.0.0/8"}})),
            ["spec.egress[0].to[0]: Forbidden: may not specify both ipBlock and another peer"]
        );
        assert_eq!(
            peer(json!({"ipBlock": {"cidr": ""}})),
            ["spec.egress[0].to[0].ipBlock.cidr: Required value"]
        );
        assert_eq!(
            peer(json!({"ipBlock": {"cidr": "10.0.0.0/33"}})),
            [
                "spec.egress[0].to[0].ipBlock.cidr: Invalid value: \"10.0.0.0/33\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
            ]
        );
        assert_eq!(
            peer(
                json!({"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.0.0.0/8", "192.168.0.0/16", "10.2.0.0/16"]}})
            ),
            [
                "spec.egress[0].to[0].ipBlock.except[0]: Invalid value: \"10.0.0.0/8\": must be a strict subset of `cidr`",
                "spec.egress[0].to[0].ipBlock.except[1]: Invalid value: \"192.168.0.0/16\": must be a strict subset of `cidr`"
            ]
        );
        assert!(
            peer(json!({"ipBlock": {"cidr": "2001:db8::/32", "except": ["2001:db8:1::/48"]}}))
                .is_empty()
        );
        assert_eq!(
            peer(json!({"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}})),
            [
                "spec.egress[0].to[0].podSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
            ]
        );
    }

    #[test]
    fn policy_types() {
        assert_eq!(
            errors(json!({"policyTypes": ["Ingress", "Sideways"]})),
            [
                "spec.policyTypes[1]: Unsupported value: \"Sideways\": supported values: \"Ingress\", \"Egress\""
            ]
        );
        assert_eq!(
            errors(json!({"policyTypes": ["Ingress", "Egress", "Ingress"]})),
            [
                "spec.policyTypes: Invalid value: []string{\"Ingress\", \"Egress\", \"Ingress\"}: may not specify more than two policyTypes"
            ]
        );
    }

    #[test]
    fn generation_follows_spec() {
        let a = policy(json!({"podSelector": {}}));
        let mut b = a.clone();
        assert_eq!(b.spec_changed(&a), Some(false));
        b.spec = Some(Default::default());
        b.spec.as_mut().unwrap().policy_types = Some(vec!["Egress".into()]);
        assert_eq!(b.spec_changed(&a), Some(true));
    }

    #[test]
    fn network_policy_rows() {
        let row = |spec: Value| {
            row_of::<NetworkPolicy>(
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "deny", "creationTimestamp": ago(300)}, "spec": spec}),
            )
        };
        assert_eq!(
            row(json!({"podSelector": {"matchLabels": {"app": "web", "tier": "a"}}})),
            vec![json!("deny"), json!("app=web,tier=a"), json!("5m")]
        );
        assert_eq!(row(json!({"podSelector": {}}))[1], "<none>");
        assert_eq!(row(json!({}))[1], "<none>");
    }
}
