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
    let mut ready = Vec::new();
    let mut terminating = Vec::new();
    for slice in slices {
        if slice.address_type != "IPv4" {
            continue;
        }
        for port in slice.ports.iter().flatten() {
            if port.name.as_deref().unwrap_or("") != port_name
                || port.protocol.as_deref().unwrap_or("TCP") != protocol
            {
                continue;
            }
            let Some(number) = port.port else { continue };
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
