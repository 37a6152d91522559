//! Which endpoints of a Service port get traffic, shared by the proxier, DNS and the Ingress
//! proxy so they agree. EndpointSlices are the only source (as kube-proxy since 1.21): a
//! Service's slices carry the `kubernetes.io/service-name` label.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// One endpoint of one Service port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: String,
    pub port: i32,
    pub node_name: Option<String>,
    pub hostname: Option<String>,
}

impl Endpoint {
    /// `ip:port`, the form upstream hashes into KUBE-SEP chain names.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }
}

/// `ns/name` of a Service.
pub fn service_key(svc: &Service) -> (String, String) {
    (
        svc.metadata.namespace.clone().unwrap_or_default(),
        svc.metadata.name.clone().unwrap_or_default(),
    )
}

/// The slices of Service `ns/name`.
pub fn slices_of<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    ns: &str,
    name: &str,
) -> Vec<&'a EndpointSlice> {
    slices
        .into_iter()
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(ns)
                && s.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(SERVICE_NAME_LABEL))
                    .is_some_and(|n| n == name)
        })
        .collect()
}

/// Serving endpoints of the port named `port_name` (empty for an unnamed port) speaking
/// `protocol`: the ready ones, or, when none is ready, the serving terminating ones (as
/// kube-proxy does since ProxyTerminatingEndpoints). IPv4 only, each `ip:port` once, sorted
/// by `ip:port` as upstream's endpoint cache sorts them.
pub fn port_endpoints(slices: &[&EndpointSlice], port_name: &str, protocol: &str) -> Vec<Endpoint> {
    serving(slices, |slice| {
        slice
            .ports
            .iter()
            .flatten()
            .find(|p| {
                p.name.as_deref().unwrap_or("") == port_name
                    && p.protocol.as_deref().unwrap_or("TCP") == protocol
            })
            .and_then(|p| p.port)
    })
}

/// The serving endpoints of a headless Service without ports (its slices list addresses
/// only, which cluster DNS still answers with), port 0.
pub fn address_endpoints(slices: &[&EndpointSlice]) -> Vec<Endpoint> {
    serving(slices, |_| Some(0))
}

/// The serving endpoints of `slices` at the port `port_of` finds in each slice.
fn serving(
    slices: &[&EndpointSlice],
    port_of: impl Fn(&EndpointSlice) -> Option<i32>,
) -> Vec<Endpoint> {
    let mut ready = Vec::new();
    let mut terminating = Vec::new();
    for slice in slices {
        if slice.address_type != "IPv4" {
            continue;
        }
        let Some(number) = port_of(slice) else {
            continue;
        };
        for ep in &slice.endpoints {
            let Some(ip) = ep.addresses.first() else {
                continue;
            };
            let cond = ep.conditions.as_ref();
            let is_ready = cond.and_then(|c| c.ready).unwrap_or(true);
            let serving = cond.and_then(|c| c.serving).unwrap_or(is_ready);
            let is_terminating = cond.and_then(|c| c.terminating).unwrap_or(false);
            let e = Endpoint {
                ip: ip.clone(),
                port: number,
                node_name: ep.node_name.clone(),
                hostname: ep.hostname.clone(),
            };
            if is_ready {
                ready.push(e);
            } else if serving && is_terminating {
                terminating.push(e);
            }
        }
    }
    let mut chosen = if ready.is_empty() { terminating } else { ready };
    chosen.sort_by_key(|e| e.addr());
    chosen.dedup_by_key(|e| e.addr());
    chosen
}

/// Whether a Service gets no virtual IP (headless or ExternalName), so no proxy rules.
pub fn is_headless(svc: &Service) -> bool {
    let Some(spec) = &svc.spec else { return true };
    let ip = spec.cluster_ip.as_deref().unwrap_or("");
    ip.is_empty() || ip == "None" || spec.type_.as_deref() == Some("ExternalName")
}

/// The slices of every Service, by `(namespace, service name)`: one pass over all slices
/// rather than a scan per Service.
pub fn slices_by_service(
    slices: &[EndpointSlice],
) -> std::collections::HashMap<(&str, &str), Vec<&EndpointSlice>> {
    let mut by: std::collections::HashMap<(&str, &str), Vec<&EndpointSlice>> = Default::default();
    for slice in slices {
        let Some(ns) = slice.metadata.namespace.as_deref() else {
            continue;
        };
        if let Some(name) = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
        {
            by.entry((ns, name.as_str())).or_default().push(slice);
        }
    }
    by
}

/// What both proxier modes read from a Service's spec and status.
pub struct ServiceFacts<'a> {
    pub cluster_ip: &'a str,
    pub external_ips: Vec<&'a str>,
    pub lb_ips: Vec<&'a str>,
    /// NodePort or LoadBalancer: its ports' nodePorts are served.
    pub node_port_type: bool,
    /// sessionAffinity ClientIP: its timeout in seconds (default 3 hours).
    pub affinity_timeout: Option<i32>,
    /// externalTrafficPolicy Local.
    pub external_local: bool,
}

impl<'a> ServiceFacts<'a> {
    pub fn of(svc: &'a Service) -> Option<ServiceFacts<'a>> {
        let spec = svc.spec.as_ref()?;
        Some(ServiceFacts {
            cluster_ip: spec.cluster_ip.as_deref().unwrap_or(""),
            external_ips: spec
                .external_ips
                .iter()
                .flatten()
                .map(String::as_str)
                .collect(),
            lb_ips: svc
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|i| i.ip.as_deref())
                .collect(),
            node_port_type: matches!(
                spec.type_.as_deref(),
                Some("NodePort") | Some("LoadBalancer")
            ),
            affinity_timeout: (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
                spec.session_affinity_config
                    .as_ref()
                    .and_then(|c| c.client_ip.as_ref())
                    .and_then(|c| c.timeout_seconds)
                    .unwrap_or(10800)
            }),
            external_local: spec.external_traffic_policy.as_deref() == Some("Local"),
        })
    }
}
