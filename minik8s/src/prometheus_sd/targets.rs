//! Prometheus's Kubernetes service discovery computed from the objects: the targets and
//! `__meta_kubernetes_*` labels that Prometheus's own `kubernetes_sd_configs` gives for the
//! roles node, pod and endpoints (its `discovery/kubernetes`), so that relabelling written
//! for it (the prometheus-community chart's, kube-prometheus's) works unchanged.
//! Empty values are left out, as Prometheus treats an empty label as an absent one.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, EndpointAddress, EndpointPort, Endpoints, Node, Pod, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// One target and its labels (a target group of one, as HTTP SD carries them).
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub address: String,
    pub labels: BTreeMap<String, String>,
}

impl Target {
    /// HTTP SD's JSON for it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"targets": [self.address], "labels": self.labels})
    }
}

const META: &str = "__meta_kubernetes_";

type Labels = BTreeMap<String, String>;

fn set(labels: &mut Labels, name: &str, value: impl AsRef<str>) {
    let value = value.as_ref();
    if !value.is_empty() {
        labels.insert(format!("{META}{name}"), value.to_string());
    }
}

/// A Kubernetes label or annotation name as a Prometheus label name (Prometheus's
/// `strutil.SanitizeLabelName`).
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `host:port`, with brackets around an IPv6 address (Go's `net.JoinHostPort`).
fn join_host_port(host: &str, port: impl std::fmt::Display) -> String {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(_)) => format!("[{host}]:{port}"),
        _ => format!("{host}:{port}"),
    }
}

/// The namespace, and the object's labels and annotations under `<role>_label_`,
/// `<role>_labelpresent_`, `<role>_annotation_` and `<role>_annotationpresent_`.
fn object_meta(labels: &mut Labels, role: &str, meta: &ObjectMeta) {
    set(
        labels,
        "namespace",
        meta.namespace.as_deref().unwrap_or_default(),
    );
    for (kind, map) in [("label", &meta.labels), ("annotation", &meta.annotations)] {
        for (k, v) in map.iter().flatten() {
            let name = sanitize(k);
            labels.insert(format!("{META}{role}_{kind}_{name}"), v.clone());
            labels.insert(format!("{META}{role}_{kind}present_{name}"), "true".into());
        }
    }
}

/// Role node: one target per node, its kubelet's address (the first InternalIP, else
/// InternalDNS, ExternalIP, ExternalDNS, LegacyHostIP, Hostname) and port; `instance` is
/// the node's name.
pub fn nodes(nodes: &[Arc<Node>]) -> Vec<Target> {
    const ORDER: [&str; 6] = [
        "InternalIP",
        "InternalDNS",
        "ExternalIP",
        "ExternalDNS",
        "LegacyHostIP",
        "Hostname",
    ];
    let mut out = Vec::new();
    for node in nodes {
        let status = node.status.as_ref();
        let mut by_type: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for a in status
            .and_then(|s| s.addresses.as_ref())
            .into_iter()
            .flatten()
        {
            by_type.entry(&a.type_).or_default().push(&a.address);
        }
        let Some(host) = ORDER
            .iter()
            .find_map(|t| by_type.get(t).and_then(|a| a.first()))
        else {
            tracing::debug!(node = ?node.metadata.name, "a node without an address is no target");
            continue;
        };
        let port = status
            .and_then(|s| s.daemon_endpoints.as_ref())
            .and_then(|d| d.kubelet_endpoint.as_ref())
            .map_or(10250, |e| e.port);
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut labels = Labels::new();
        object_meta(&mut labels, "node", &node.metadata);
        // Nodes have no namespace: object_meta set none.
        set(&mut labels, "node_name", &name);
        set(
            &mut labels,
            "node_provider_id",
            node.spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .unwrap_or_default(),
        );
        for (t, addresses) in &by_type {
            set(&mut labels, &format!("node_address_{t}"), addresses[0]);
        }
        labels.insert("instance".into(), name);
        out.push(Target {
            address: join_host_port(host, port),
            labels,
        });
    }
    out
}

/// The labels every target of a pod carries (Prometheus's `podLabels`).
fn pod_labels(pod: &Pod) -> Labels {
    let mut labels = Labels::new();
    let status = pod.status.as_ref();
    set(
        &mut labels,
        "pod_name",
        pod.metadata.name.as_deref().unwrap_or_default(),
    );
    set(
        &mut labels,
        "pod_ip",
        status.and_then(|s| s.pod_ip.as_deref()).unwrap_or_default(),
    );
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map_or("unknown".to_string(), |c| c.status.to_lowercase());
    set(&mut labels, "pod_ready", ready);
    set(
        &mut labels,
        "pod_phase",
        status.and_then(|s| s.phase.as_deref()).unwrap_or_default(),
    );
    set(
        &mut labels,
        "pod_node_name",
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or_default(),
    );
    set(
        &mut labels,
        "pod_host_ip",
        status
            .and_then(|s| s.host_ip.as_deref())
            .unwrap_or_default(),
    );
    set(
        &mut labels,
        "pod_uid",
        pod.metadata.uid.as_deref().unwrap_or_default(),
    );
    object_meta(&mut labels, "pod", &pod.metadata);
    if let Some(owner) = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    {
        set(&mut labels, "pod_controller_kind", &owner.kind);
        set(&mut labels, "pod_controller_name", &owner.name);
    }
    labels
}

fn container_id(statuses: Option<&Vec<ContainerStatus>>, name: &str) -> String {
    statuses
        .into_iter()
        .flatten()
        .find(|s| s.name == name)
        .and_then(|s| s.container_id.clone())
        .unwrap_or_default()
}

fn container_labels(labels: &mut Labels, c: &Container) {
    set(labels, "pod_container_name", &c.name);
    set(
        labels,
        "pod_container_image",
        c.image.as_deref().unwrap_or_default(),
    );
}

/// Role pod: one target per port a container declares (pod IP and port), and one per
/// container that declares none (the pod IP alone); pods without an IP have none.
pub fn pods(pods: &[Arc<Pod>]) -> Vec<Target> {
    let mut out = Vec::new();
    for pod in pods {
        let Some(ip) = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .filter(|ip| !ip.is_empty())
        else {
            continue;
        };
        let Some(spec) = &pod.spec else { continue };
        let base = pod_labels(pod);
        let status = pod.status.as_ref();
        let init = spec.init_containers.iter().flatten().map(|c| (c, true));
        for (c, is_init) in spec.containers.iter().map(|c| (c, false)).chain(init) {
            let statuses = status.and_then(|s| {
                if is_init {
                    s.init_container_statuses.as_ref()
                } else {
                    s.container_statuses.as_ref()
                }
            });
            let mut labels = base.clone();
            container_labels(&mut labels, c);
            set(
                &mut labels,
                "pod_container_id",
                container_id(statuses, &c.name),
            );
            set(&mut labels, "pod_container_init", is_init.to_string());
            let ports = c.ports.as_deref().unwrap_or_default();
            if ports.is_empty() {
                out.push(Target {
                    address: ip.to_string(),
                    labels,
                });
                continue;
            }
            for port in ports {
                let mut labels = labels.clone();
                set(
                    &mut labels,
                    "pod_container_port_name",
                    port.name.as_deref().unwrap_or_default(),
                );
                set(
                    &mut labels,
                    "pod_container_port_number",
                    port.container_port.to_string(),
                );
                set(
                    &mut labels,
                    "pod_container_port_protocol",
                    port.protocol.as_deref().unwrap_or("TCP"),
                );
                out.push(Target {
                    address: join_host_port(ip, port.container_port),
                    labels,
                });
            }
        }
    }
    out
}

/// The pods an Endpoints' addresses named, by namespace and name, with the ports that
/// covered them.
type SeenPods<'a> = BTreeMap<(String, String), (&'a Arc<Pod>, Vec<i32>)>;

fn key(namespace: Option<&str>, name: Option<&str>) -> (String, String) {
    (
        namespace.unwrap_or_default().to_string(),
        name.unwrap_or_default().to_string(),
    )
}

/// Role endpoints: one target per address and port of every Endpoints, with its Service's
/// labels and, for an address that is a pod, the pod's (and the container whose port it
/// is); then one per container port of those pods that no endpoint port covered.
pub fn endpoints(
    endpoints: &[Arc<Endpoints>],
    services: &[Arc<Service>],
    pods: &[Arc<Pod>],
) -> Vec<Target> {
    let services: BTreeMap<_, _> = services
        .iter()
        .map(|s| {
            (
                key(s.metadata.namespace.as_deref(), s.metadata.name.as_deref()),
                s,
            )
        })
        .collect();
    let pods: BTreeMap<_, _> = pods
        .iter()
        .map(|p| {
            (
                key(p.metadata.namespace.as_deref(), p.metadata.name.as_deref()),
                p,
            )
        })
        .collect();
    let mut out = Vec::new();
    for eps in endpoints {
        let ns = eps.metadata.namespace.as_deref();
        let mut group = Labels::new();
        if let Some(svc) = services.get(&key(ns, eps.metadata.name.as_deref())) {
            object_meta(&mut group, "service", &svc.metadata);
            set(
                &mut group,
                "service_name",
                svc.metadata.name.as_deref().unwrap_or_default(),
            );
        }
        object_meta(&mut group, "endpoints", &eps.metadata);
        set(
            &mut group,
            "endpoints_name",
            eps.metadata.name.as_deref().unwrap_or_default(),
        );
        // Pods seen, with the endpoint ports that covered them.
        let mut seen: SeenPods = BTreeMap::new();
        let mut add = |addr: &EndpointAddress, port: &EndpointPort, ready: &str| {
            let mut labels = group.clone();
            set(
                &mut labels,
                "endpoint_port_name",
                port.name.as_deref().unwrap_or_default(),
            );
            set(
                &mut labels,
                "endpoint_port_protocol",
                port.protocol.as_deref().unwrap_or("TCP"),
            );
            set(&mut labels, "endpoint_ready", ready);
            if let Some(r) = &addr.target_ref {
                set(
                    &mut labels,
                    "endpoint_address_target_kind",
                    r.kind.as_deref().unwrap_or_default(),
                );
                set(
                    &mut labels,
                    "endpoint_address_target_name",
                    r.name.as_deref().unwrap_or_default(),
                );
            }
            set(
                &mut labels,
                "endpoint_node_name",
                addr.node_name.as_deref().unwrap_or_default(),
            );
            set(
                &mut labels,
                "endpoint_hostname",
                addr.hostname.as_deref().unwrap_or_default(),
            );
            let pod = addr
                .target_ref
                .as_ref()
                .filter(|r| r.kind.as_deref() == Some("Pod"))
                .and_then(|r| pods.get(&key(r.namespace.as_deref().or(ns), r.name.as_deref())));
            if let Some(pod) = pod {
                labels.extend(pod_labels(pod));
                let containers = pod.spec.iter().flat_map(|s| s.containers.iter());
                if let Some((c, cport)) = containers
                    .flat_map(|c| c.ports.iter().flatten().map(move |p| (c, p)))
                    .find(|(_, p)| p.container_port == port.port)
                {
                    container_labels(&mut labels, c);
                    set(
                        &mut labels,
                        "pod_container_port_name",
                        cport.name.as_deref().unwrap_or_default(),
                    );
                    set(
                        &mut labels,
                        "pod_container_port_number",
                        port.port.to_string(),
                    );
                    set(
                        &mut labels,
                        "pod_container_port_protocol",
                        port.protocol.as_deref().unwrap_or("TCP"),
                    );
                }
                let k = key(
                    pod.metadata.namespace.as_deref(),
                    pod.metadata.name.as_deref(),
                );
                seen.entry(k).or_insert((pod, Vec::new())).1.push(port.port);
            }
            out.push(Target {
                address: join_host_port(&addr.ip, port.port),
                labels,
            });
        };
        for subset in eps.subsets.iter().flatten() {
            for port in subset.ports.iter().flatten() {
                for addr in subset.addresses.iter().flatten() {
                    add(addr, port, "true");
                }
                for addr in subset.not_ready_addresses.iter().flatten() {
                    add(addr, port, "false");
                }
            }
        }
        for (pod, covered) in seen.values() {
            let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()) else {
                continue;
            };
            for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
                for cport in c.ports.iter().flatten() {
                    if covered.contains(&cport.container_port) {
                        continue;
                    }
                    let mut labels = group.clone();
                    labels.extend(pod_labels(pod));
                    container_labels(&mut labels, c);
                    set(
                        &mut labels,
                        "pod_container_port_name",
                        cport.name.as_deref().unwrap_or_default(),
                    );
                    set(
                        &mut labels,
                        "pod_container_port_number",
                        cport.container_port.to_string(),
                    );
                    set(
                        &mut labels,
                        "pod_container_port_protocol",
                        cport.protocol.as_deref().unwrap_or("TCP"),
                    );
                    out.push(Target {
                        address: join_host_port(ip, cport.container_port),
                        labels,
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj<T: k8s_openapi::serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn node_targets_are_kubelets_named_by_node() {
        let node: Arc<Node> = obj(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "status": {
                "addresses": [{"type": "Hostname", "address": "n1"},
                              {"type": "InternalIP", "address": "192.0.2.2"},
                              {"type": "InternalIP", "address": "192.0.2.3"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            },
        }));
        let nameless: Arc<Node> = obj(serde_json::json!({"metadata": {"name": "n2"}}));
        let t = nodes(&[node, nameless]);
        assert_eq!(t.len(), 1, "a node without an address is no target");
        assert_eq!(t[0].address, "192.0.2.2:10250");
        let l = &t[0].labels;
        assert_eq!(l["instance"], "n1");
        assert_eq!(l["__meta_kubernetes_node_name"], "n1");
        assert_eq!(l["__meta_kubernetes_node_address_InternalIP"], "192.0.2.2");
        assert_eq!(l["__meta_kubernetes_node_address_Hostname"], "n1");
        assert_eq!(
            l["__meta_kubernetes_node_label_kubernetes_io_hostname"],
            "n1"
        );
        assert_eq!(
            l["__meta_kubernetes_node_labelpresent_kubernetes_io_hostname"],
            "true"
        );
        assert!(!l.contains_key("__meta_kubernetes_namespace"));
    }

    fn pod() -> Arc<Pod> {
        obj(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "ns", "uid": "u1",
                         "annotations": {"prometheus.io/scrape": "true"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": "web", "uid": "r", "controller": true}]},
            "spec": {"nodeName": "n1",
                     "containers": [{"name": "app", "image": "busybox",
                                     "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                                               {"name": "metrics", "containerPort": 9100, "protocol": "TCP"}]},
                                    {"name": "side", "image": "pause"}],
                     "initContainers": [{"name": "init", "image": "busybox"}]},
            "status": {"podIP": "10.244.0.5", "hostIP": "192.0.2.2", "phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "app", "containerID": "containerd://abc",
                                              "image": "busybox", "imageID": "", "ready": true,
                                              "restartCount": 0}]},
        }))
    }

    #[test]
    fn pod_targets_per_port_and_per_portless_container() {
        let pending: Arc<Pod> = obj(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c"}]},
        }));
        let t = pods(&[pod(), pending]);
        let addrs: Vec<&str> = t.iter().map(|t| t.address.as_str()).collect();
        assert_eq!(
            addrs,
            [
                "10.244.0.5:8080",
                "10.244.0.5:9100",
                "10.244.0.5",
                "10.244.0.5"
            ]
        );
        let l = &t[1].labels;
        assert_eq!(l["__meta_kubernetes_namespace"], "ns");
        assert_eq!(l["__meta_kubernetes_pod_name"], "web-1");
        assert_eq!(l["__meta_kubernetes_pod_ready"], "true");
        assert_eq!(l["__meta_kubernetes_pod_phase"], "Running");
        assert_eq!(l["__meta_kubernetes_pod_node_name"], "n1");
        assert_eq!(l["__meta_kubernetes_pod_container_name"], "app");
        assert_eq!(l["__meta_kubernetes_pod_container_id"], "containerd://abc");
        assert_eq!(l["__meta_kubernetes_pod_container_port_name"], "metrics");
        assert_eq!(l["__meta_kubernetes_pod_container_port_number"], "9100");
        assert_eq!(l["__meta_kubernetes_pod_container_init"], "false");
        assert_eq!(l["__meta_kubernetes_pod_controller_kind"], "ReplicaSet");
        assert_eq!(
            l["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
            "true"
        );
        assert_eq!(t[3].labels["__meta_kubernetes_pod_container_init"], "true");
        assert!(
            !t[2]
                .labels
                .contains_key("__meta_kubernetes_pod_container_port_number")
        );
    }

    #[test]
    fn endpoint_targets_with_service_and_pod_labels() {
        let eps: Arc<Endpoints> = obj(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "subsets": [{
                "addresses": [{"ip": "10.244.0.5", "nodeName": "n1",
                               "targetRef": {"kind": "Pod", "name": "web-1", "namespace": "ns"}}],
                "notReadyAddresses": [{"ip": "10.244.0.9"}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            }],
        }));
        let svc: Arc<Service> = obj(serde_json::json!({
            "metadata": {"name": "web", "namespace": "ns", "annotations": {"prometheus.io/scrape": "true"}},
        }));
        let t = endpoints(&[eps], &[svc], &[pod()]);
        let addrs: Vec<&str> = t.iter().map(|t| t.address.as_str()).collect();
        // The pod's metrics port, which the Service does not name, is a target of its own.
        assert_eq!(
            addrs,
            ["10.244.0.5:8080", "10.244.0.9:8080", "10.244.0.5:9100"]
        );
        let l = &t[0].labels;
        assert_eq!(l["__meta_kubernetes_service_name"], "web");
        assert_eq!(
            l["__meta_kubernetes_service_annotation_prometheus_io_scrape"],
            "true"
        );
        assert_eq!(l["__meta_kubernetes_endpoints_name"], "web");
        assert_eq!(l["__meta_kubernetes_endpoint_port_name"], "http");
        assert_eq!(l["__meta_kubernetes_endpoint_ready"], "true");
        assert_eq!(l["__meta_kubernetes_endpoint_node_name"], "n1");
        assert_eq!(l["__meta_kubernetes_endpoint_address_target_kind"], "Pod");
        assert_eq!(l["__meta_kubernetes_pod_name"], "web-1");
        assert_eq!(l["__meta_kubernetes_pod_container_port_name"], "http");
        assert_eq!(t[1].labels["__meta_kubernetes_endpoint_ready"], "false");
        assert!(!t[1].labels.contains_key("__meta_kubernetes_pod_name"));
        assert_eq!(
            t[2].labels["__meta_kubernetes_pod_container_port_name"],
            "metrics"
        );
        assert!(
            !t[2]
                .labels
                .contains_key("__meta_kubernetes_endpoint_port_name")
        );
    }

    #[test]
    fn label_names_and_ipv6_addresses() {
        assert_eq!(sanitize("app.kubernetes.io/name"), "app_kubernetes_io_name");
        assert_eq!(join_host_port("fd00::1", 80), "[fd00::1]:80");
        assert_eq!(join_host_port("10.0.0.1", 80), "10.0.0.1:80");
    }
}
