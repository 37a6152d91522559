//! Services: type-dependent fields, allocated cluster IPs and node ports that updates keep,
//! and the IP-family rules.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use crate::kinds::pod::validation::is_port_name;
use crate::spec_and_status;
use crate::strategy::Kind;
use crate::table::{
    AGE, Column, NAME, Row, age, format_labels, load_balancer_points, name, or_empty, string, text,
};
use crate::validation::{Errors, FieldError, Path, dns1123_subdomain};

const SERVICE_TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];

impl Kind for Service {
    const COLUMNS: &'static [Column] = SERVICE_COLUMNS;
    const FIELDS: &'static [&'static str] = &["spec.clusterIP", "spec.type"];
    const RETURN_DELETED: bool = true;
    const CREATE_ON_UPDATE: bool = true;

    spec_and_status!();

    fn default_fields(&mut self) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        let ty = spec.type_.get_or_insert_with(|| "ClusterIP".into()).clone();
        let affinity = spec
            .session_affinity
            .get_or_insert_with(|| "None".into())
            .clone();
        if affinity == "None" {
            spec.session_affinity_config = None;
        } else if affinity == "ClientIP" {
            let cfg = spec
                .session_affinity_config
                .get_or_insert_with(Default::default);
            cfg.client_ip
                .get_or_insert_with(Default::default)
                .timeout_seconds
                .get_or_insert(10800);
        }
        for p in spec.ports.iter_mut().flatten() {
            p.protocol.get_or_insert_with(|| "TCP".into());
            match &p.target_port {
                None | Some(IntOrString::Int(0)) => p.target_port = Some(IntOrString::Int(p.port)),
                Some(IntOrString::String(s)) if s.is_empty() => {
                    p.target_port = Some(IntOrString::Int(p.port))
                }
                _ => {}
            }
        }
        let external = ty == "NodePort"
            || ty == "LoadBalancer"
            || spec
                .external_ips
                .as_ref()
                .is_some_and(|ips| !ips.is_empty());
        if external {
            spec.external_traffic_policy
                .get_or_insert_with(|| "Cluster".into());
        }
        if ty != "ExternalName" {
            spec.internal_traffic_policy
                .get_or_insert_with(|| "Cluster".into());
        }
        if ty == "LoadBalancer" {
            spec.allocate_load_balancer_node_ports.get_or_insert(true);
        }
    }

    fn prepare_create(&mut self) {
        self.status = Some(Default::default());
        if let Some(spec) = self.spec.as_mut() {
            normalize_cluster_ips(spec, None);
        }
    }

    fn prepare_update(&mut self, old: &Self) {
        let (Some(new), Some(old)) = (self.spec.as_mut(), old.spec.as_ref()) else {
            return;
        };
        drop_type_dependent_fields(new, old);
        patch_allocated_values(new, old);
        normalize_cluster_ips(new, Some(old));
    }

    fn validate(&self, errs: &mut Errors) {
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&Path::new("spec"), ""));
            return;
        };
        validate_cluster_ips(spec, errs);
        let path = Path::new("spec");
        let ty = spec.type_.as_deref().unwrap_or("ClusterIP");
        if !SERVICE_TYPES.contains(&ty) {
            errs.push(FieldError::not_supported(
                &path.child("type"),
                ty,
                SERVICE_TYPES,
            ));
        }
        if ty == "ExternalName" {
            match spec.external_name.as_deref() {
                None | Some("") => errs.push(FieldError::required(&path.child("externalName"), "")),
                Some(n) => {
                    for e in dns1123_subdomain(n.trim_end_matches('.')) {
                        errs.push(FieldError::invalid(&path.child("externalName"), n, e));
                    }
                }
            }
        } else if spec.ports.as_ref().is_none_or(|p| p.is_empty())
            && spec.cluster_ip.as_deref() != Some("None")
        {
            errs.push(FieldError::required(&path.child("ports"), ""));
        }
        let ports = spec.ports.as_deref().unwrap_or_default();
        let mut names = std::collections::BTreeSet::new();
        for (i, p) in ports.iter().enumerate() {
            let pp = path.child("ports").index(i);
            match p.name.as_deref() {
                None | Some("") if ports.len() > 1 => {
                    errs.push(FieldError::required(&pp.child("name"), ""))
                }
                Some(n) if !n.is_empty() => {
                    for e in crate::validation::dns1123_label(n) {
                        errs.push(FieldError::invalid(&pp.child("name"), n, e));
                    }
                    if !names.insert(n.to_string()) {
                        errs.push(FieldError::duplicate(&pp.child("name"), n));
                    }
                }
                _ => {}
            }
            if !(1..=65535).contains(&p.port) {
                errs.push(FieldError::invalid(
                    &pp.child("port"),
                    p.port,
                    "must be between 1 and 65535, inclusive",
                ));
            }
            if let Some(proto) = &p.protocol
                && !["TCP", "UDP", "SCTP"].contains(&proto.as_str())
            {
                errs.push(FieldError::not_supported(
                    &pp.child("protocol"),
                    proto,
                    &["SCTP", "TCP", "UDP"],
                ));
            }
            match &p.target_port {
                Some(IntOrString::Int(n)) if !(1..=65535).contains(n) => {
                    errs.push(FieldError::invalid(
                        &pp.child("targetPort"),
                        n,
                        "must be between 1 and 65535, inclusive",
                    ))
                }
                Some(IntOrString::String(s)) if !is_port_name(s) => errs.push(FieldError::invalid(
                    &pp.child("targetPort"),
                    s,
                    "must contain at least one letter (a-z)",
                )),
                _ => {}
            }
            if let Some(np) = p.node_port {
                if ty != "NodePort" && ty != "LoadBalancer" && np != 0 {
                    errs.push(FieldError::forbidden(
                        &pp.child("nodePort"),
                        "may not be used when `type` is 'ClusterIP'",
                    ));
                } else if np != 0 && !(1..=65535).contains(&np) {
                    errs.push(FieldError::invalid(
                        &pp.child("nodePort"),
                        np,
                        "must be between 1 and 65535, inclusive",
                    ));
                }
            }
        }
        if let Some(sel) = &spec.selector {
            crate::validation::validate_labels(sel, &path.child("selector"), errs);
        }
        if let Some(a) = &spec.session_affinity
            && !["None", "ClientIP"].contains(&a.as_str())
        {
            errs.push(FieldError::not_supported(
                &path.child("sessionAffinity"),
                a,
                &["ClientIP", "None"],
            ));
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        let (Some(new), Some(old)) = (&self.spec, &old.spec) else {
            return;
        };
        // The primary cluster IP, once given, stays unless the type goes to or from
        // ExternalName (upstream's validateUpgradeDowngradeClusterIPs).
        let external = |s: &ServiceSpec| s.type_.as_deref() == Some("ExternalName");
        if external(old) || external(new) {
            return;
        }
        let old_ip = old.cluster_ip.as_deref().unwrap_or("");
        let new_ip = new.cluster_ip.as_deref().unwrap_or("");
        if !old_ip.is_empty() && new_ip != old_ip {
            errs.push(FieldError::invalid(
                &Path::new("spec").child("clusterIPs").index(0),
                new_ip,
                "may not change once set",
            ));
        }
        // Families left out are filled in from the stored ones by the allocator.
        let first = |s: &ServiceSpec| s.ip_families.as_ref().and_then(|f| f.first()).cloned();
        if first(old).is_some() && first(new).is_some() && first(new) != first(old) {
            errs.push(FieldError::invalid(
                &Path::new("spec").child("ipFamilies").index(0),
                new.ip_families
                    .as_ref()
                    .and_then(|f| f.first())
                    .cloned()
                    .unwrap_or_default(),
                "may not change once set",
            ));
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        let spec = self.spec.as_ref()?;
        match name {
            "spec.clusterIP" => spec.cluster_ip.clone(),
            "spec.type" => spec.type_.clone(),
            _ => None,
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(service_cells(self, now))
    }
}

fn needs_cluster_ip(spec: &ServiceSpec) -> bool {
    spec.type_.as_deref() != Some("ExternalName")
}

/// NodePort and LoadBalancer services have node ports.
pub fn needs_node_port(spec: &ServiceSpec) -> bool {
    matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"))
}

fn node_ports(spec: &ServiceSpec) -> Vec<i32> {
    spec.ports
        .iter()
        .flatten()
        .filter_map(|p| p.node_port.filter(|n| *n != 0))
        .collect()
}

/// Upstream's dropTypeDependentFields: leaving a type clears what only that type has, unless
/// the update itself changed those values.
fn drop_type_dependent_fields(new: &mut ServiceSpec, old: &ServiceSpec) {
    if needs_cluster_ip(old) && !needs_cluster_ip(new) {
        if new.cluster_ip == old.cluster_ip && new.cluster_ips == old.cluster_ips {
            new.cluster_ip = None;
            new.cluster_ips = None;
        }
        if new.ip_families == old.ip_families {
            new.ip_families = None;
        }
        if new.ip_family_policy == old.ip_family_policy {
            new.ip_family_policy = None;
        }
    }
    if needs_node_port(old) && !needs_node_port(new) && node_ports(new) == node_ports(old) {
        for p in new.ports.iter_mut().flatten() {
            p.node_port = None;
        }
    }
    if new.type_.as_deref() != Some("LoadBalancer") {
        new.allocate_load_balancer_node_ports = None;
    }
    let external = needs_node_port(new) || new.external_ips.as_ref().is_some_and(|i| !i.is_empty());
    if !external {
        new.external_traffic_policy = None;
    }
}

/// Upstream's patchAllocatedValues: an update that leaves out the allocated cluster IP or
/// node ports (a PUT from a manifest, `kubectl apply`) keeps the stored ones.
fn patch_allocated_values(new: &mut ServiceSpec, old: &ServiceSpec) {
    if needs_cluster_ip(old) && needs_cluster_ip(new) {
        if new.cluster_ip.as_deref().unwrap_or("").is_empty() {
            new.cluster_ip = old.cluster_ip.clone();
        }
        if new.cluster_ips.as_ref().is_none_or(|i| i.is_empty())
            && old.cluster_ips.as_ref().is_some_and(|i| !i.is_empty())
        {
            new.cluster_ips = old.cluster_ips.clone();
        }
    }
    if needs_node_port(old) && needs_node_port(new) {
        let old_ports = node_ports(old);
        let new_ports = node_ports(new);
        let used: Vec<i32> = old_ports
            .into_iter()
            .filter(|p| new_ports.contains(p))
            .collect();
        let by_name: BTreeMap<String, i32> = old
            .ports
            .iter()
            .flatten()
            .map(|p| (p.name.clone().unwrap_or_default(), p.node_port.unwrap_or(0)))
            .collect();
        for p in new.ports.iter_mut().flatten() {
            if p.node_port.unwrap_or(0) == 0
                && let Some(old) = by_name.get(p.name.as_deref().unwrap_or(""))
                && *old != 0
                && !used.contains(old)
            {
                p.node_port = Some(*old);
            }
        }
    }
}

/// Upstream's normalizeClusterIPs: clients that only know `clusterIP` get `clusterIPs` to match.
fn normalize_cluster_ips(new: &mut ServiceSpec, old: Option<&ServiceSpec>) {
    let ip = new.cluster_ip.clone().unwrap_or_default();
    let ips_empty = new.cluster_ips.as_ref().is_none_or(|i| i.is_empty());
    if ip.is_empty() {
        return;
    }
    match old {
        Some(old) if ips_empty || new.cluster_ips == old.cluster_ips => {
            if old.cluster_ip.as_deref() == Some(ip.as_str()) && ips_empty {
                new.cluster_ips = old.cluster_ips.clone();
            } else if old.cluster_ip.as_deref() != Some(ip.as_str()) {
                new.cluster_ips = Some(vec![ip]);
            }
        }
        None if ips_empty => new.cluster_ips = Some(vec![ip]),
        _ => {}
    }
}

const IP_FAMILIES: &[&str] = &["IPv4", "IPv6"];
const IP_FAMILY_POLICIES: &[&str] = &["PreferDualStack", "RequireDualStack", "SingleStack"];

/// Upstream's ValidateServiceClusterIPsRelatedFields, for one IP family.
fn validate_cluster_ips(spec: &ServiceSpec, errs: &mut Errors) {
    let path = Path::new("spec");
    let ty = spec.type_.as_deref().unwrap_or("ClusterIP");
    let ip = spec.cluster_ip.as_deref().unwrap_or("");
    let ips = spec.cluster_ips.as_deref().unwrap_or_default();
    if ty == "ExternalName" {
        if !ip.is_empty() || !ips.is_empty() {
            errs.push(FieldError::forbidden(
                &path.child("clusterIPs"),
                "may not be set for ExternalName services",
            ));
        }
        if spec.ip_families.as_ref().is_some_and(|f| !f.is_empty()) {
            errs.push(FieldError::forbidden(
                &path.child("ipFamilies"),
                "may not be set for ExternalName services",
            ));
        }
        if spec.ip_family_policy.is_some() {
            errs.push(FieldError::forbidden(
                &path.child("ipFamilyPolicy"),
                "may not be set for ExternalName services",
            ));
        }
        return;
    }
    if !ips.is_empty() && ips[0] != ip {
        errs.push(FieldError::invalid(
            &path.child("clusterIPs").index(0),
            &ips[0],
            "must match `clusterIP` when set",
        ));
    }
    if ips.len() > 2 {
        errs.push(FieldError::invalid(
            &path.child("clusterIPs"),
            ips,
            "may only hold up to 2 values",
        ));
    }
    for (i, v) in ips.iter().enumerate() {
        let p = path.child("clusterIPs").index(i);
        if v == "None" {
            if i > 0 || ips.len() > 1 {
                errs.push(FieldError::invalid(
                    &p,
                    v,
                    "must not have 'None' specified with other IPs",
                ));
            } else if ty == "NodePort" || ty == "LoadBalancer" {
                errs.push(FieldError::invalid(
                    &p,
                    v,
                    format!("may not be set to 'None' for {ty} services"),
                ));
            }
        } else if v.parse::<std::net::IpAddr>().is_err() {
            errs.push(FieldError::invalid(
                &p,
                v,
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
    }
    if ips.is_empty() && !ip.is_empty() && ip != "None" && ip.parse::<std::net::IpAddr>().is_err() {
        errs.push(FieldError::invalid(
            &path.child("clusterIPs").index(0),
            ip,
            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        ));
    }
    for (i, f) in spec.ip_families.iter().flatten().enumerate() {
        if !IP_FAMILIES.contains(&f.as_str()) {
            errs.push(FieldError::not_supported(
                &path.child("ipFamilies").index(i),
                f,
                IP_FAMILIES,
            ));
        }
    }
    if let Some(p) = &spec.ip_family_policy
        && !IP_FAMILY_POLICIES.contains(&p.as_str())
    {
        errs.push(FieldError::not_supported(
            &path.child("ipFamilyPolicy"),
            p,
            IP_FAMILY_POLICIES,
        ));
    }
    // A node port may serve one protocol once.
    let mut seen = std::collections::BTreeSet::new();
    for (i, p) in spec.ports.iter().flatten().enumerate() {
        if let Some(np) = p.node_port.filter(|n| *n != 0)
            && !seen.insert((np, p.protocol.clone().unwrap_or_default()))
        {
            errs.push(FieldError::duplicate(
                &path.child("ports").index(i).child("nodePort"),
                np,
            ));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const SERVICE_COLUMNS: &[Column] = &[
    NAME,
    string("Type", doc::SERVICE_TYPE),
    string("Cluster-IP", doc::SERVICE_CLUSTER_IP),
    string("External-IP", doc::SERVICE_EXTERNAL_IPS),
    string("Port(s)", doc::SERVICE_PORTS),
    AGE,
    string("Selector", doc::SERVICE_SELECTOR).wide(),
];

fn service_cells(svc: &Service, now: Timestamp) -> Vec<Value> {
    let spec = svc.spec.clone().unwrap_or_default();
    let type_ = or_empty(spec.type_.as_ref());
    // spec.clusterIP is authoritative over clusterIPs, as in the conversion to internal.
    let cluster_ip = spec
        .cluster_ip
        .as_deref()
        .filter(|ip| !ip.is_empty())
        .or_else(|| {
            spec.cluster_ips
                .as_ref()
                .and_then(|ips| ips.first())
                .map(String::as_str)
        })
        .unwrap_or("<none>");
    let external_ips = spec.external_ips.clone().unwrap_or_default();
    let external_ip = match type_ {
        "ClusterIP" | "NodePort" => {
            if external_ips.is_empty() {
                "<none>".to_string()
            } else {
                external_ips.join(",")
            }
        }
        "LoadBalancer" => {
            let ingress = svc
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_deref())
                .unwrap_or(&[]);
            let lb_ips =
                load_balancer_points(ingress.iter().map(|i| (i.ip.as_ref(), i.hostname.as_ref())));
            if !external_ips.is_empty() {
                let mut all: Vec<String> = Vec::new();
                if !lb_ips.is_empty() {
                    all.extend(lb_ips.split(',').map(str::to_string));
                }
                all.extend(external_ips);
                all.join(",")
            } else if !lb_ips.is_empty() {
                lb_ips
            } else {
                "<pending>".to_string()
            }
        }
        "ExternalName" => or_empty(spec.external_name.as_ref()).to_string(),
        _ => "<unknown>".to_string(),
    };
    let ports = spec
        .ports
        .iter()
        .flatten()
        .map(|p| {
            let protocol = p.protocol.as_deref().unwrap_or("TCP");
            match p.node_port {
                Some(node_port) if node_port > 0 => format!("{}:{node_port}/{protocol}", p.port),
                _ => format!("{}/{protocol}", p.port),
            }
        })
        .collect::<Vec<_>>()
        .join(",");
    vec![
        name(&svc.metadata),
        text(type_),
        text(cluster_ip),
        text(external_ip),
        text(if ports.is_empty() {
            "<none>".to_string()
        } else {
            ports
        }),
        age(&svc.metadata, now),
        text(format_labels(spec.selector.as_ref())),
    ]
}

mod doc {
    pub const SERVICE_TYPE: &str = "type determines how the Service is exposed. Defaults to ClusterIP. Valid options are ExternalName, ClusterIP, NodePort, and LoadBalancer. \"ClusterIP\" allocates a cluster-internal IP address for load-balancing to endpoints. Endpoints are determined by the selector or if that is not specified, by manual construction of an Endpoints object or EndpointSlice objects. If clusterIP is \"None\", no virtual IP is allocated and the endpoints are published as a set of endpoints rather than a virtual IP. \"NodePort\" builds on ClusterIP and allocates a port on every node which routes to the same endpoints as the clusterIP. \"LoadBalancer\" builds on NodePort and creates an external load-balancer (if supported in the current cloud) which routes to the same endpoints as the clusterIP. \"ExternalName\" aliases this service to the specified externalName. Several other fields do not apply to ExternalName services. More info: https://kubernetes.io/docs/concepts/services-networking/service/#publishing-services-service-types";
    pub const SERVICE_CLUSTER_IP: &str = "clusterIP is the IP address of the service and is usually assigned randomly. If an address is specified manually, is in-range (as per system configuration), and is not in use, it will be allocated to the service; otherwise creation of the service will fail. This field may not be changed through updates unless the type field is also being changed to ExternalName (which requires this field to be blank) or the type field is being changed from ExternalName (in which case this field may optionally be specified, as describe above).  Valid values are \"None\", empty string (\"\"), or a valid IP address. Setting this to \"None\" makes a \"headless service\" (no virtual IP), which is useful when direct endpoint connections are preferred and proxying is not required.  Only applies to types ClusterIP, NodePort, and LoadBalancer. If this field is specified when creating a Service of type ExternalName, creation will fail. This field will be wiped when updating a Service to type ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies";
    pub const SERVICE_EXTERNAL_IPS: &str = "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.  These IPs are not managed by Kubernetes.  The user is responsible for ensuring that traffic arrives at a node with this IP.  A common example is external load-balancers that are not part of the Kubernetes system.";
    pub const SERVICE_PORTS: &str = "The list of ports that are exposed by this service. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies";
    pub const SERVICE_SELECTOR: &str = "Route service traffic to pods with label keys and values matching this selector. If empty or not present, the service is assumed to have an external process managing its endpoints, which Kubernetes will not modify. Only applies to types ClusterIP, NodePort, and LoadBalancer. Ignored if type is ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/";
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    fn service(spec: Value, status: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "svc", "creationTimestamp": ago(45)},
               "spec": spec, "status": status})
    }

    #[test]
    fn service_rows() {
        assert_eq!(
            row_of::<Service>(service(
                json!({"type": "NodePort", "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"],
                           "selector": {"b": "2", "a": "1"},
                           "ports": [{"port": 80, "protocol": "TCP"}, {"port": 443, "nodePort": 30443, "protocol": "TCP"}]}),
                json!({})
            )),
            vec![
                json!("svc"),
                json!("NodePort"),
                json!("10.0.0.1"),
                json!("<none>"),
                json!("80/TCP,443:30443/TCP"),
                json!("45s"),
                json!("a=1,b=2")
            ]
        );
        // ClusterIP with external IPs; headless; no ports; no selector.
        let c = row_of::<Service>(service(
            json!({"type": "ClusterIP", "clusterIP": "None", "externalIPs": ["1.2.3.4", "5.6.7.8"]}),
            json!({}),
        ));
        assert_eq!(c[2], "None");
        assert_eq!(c[3], "1.2.3.4,5.6.7.8");
        assert_eq!(c[4], "<none>");
        assert_eq!(c[6], "<none>");
        // Load balancers: pending, then the sorted ingress points (never clipped: the server
        // prints wide), then those and the external IPs.
        let lb = |status: Value, external: Value| {
            row_of::<Service>(service(
                json!({"type": "LoadBalancer", "clusterIPs": ["1.5.6.7"], "externalIPs": external,
                           "ports": [{"port": 80, "protocol": "TCP"}, {"port": 8090, "protocol": "UDP"},
                                     {"port": 7777, "protocol": "SCTP"}]}),
                status,
            ))
        };
        let pending = lb(json!({}), json!([]));
        assert_eq!(pending[2], "1.5.6.7");
        assert_eq!(pending[3], "<pending>");
        assert_eq!(pending[4], "80/TCP,8090/UDP,7777/SCTP");
        let points = json!({"loadBalancer": {"ingress": [
            {"ip": "3.4.5.6"}, {"ip": "2.3.4.5"}, {"ip": "5.6.7.8", "hostname": "host5678"},
            {"hostname": "lb.example.com"}, {"ip": "2.3.4.5"}]}});
        assert_eq!(
            lb(points.clone(), json!([]))[3],
            "2.3.4.5,3.4.5.6,5.6.7.8,lb.example.com"
        );
        assert_eq!(
            lb(points, json!(["9.9.9.9"]))[3],
            "2.3.4.5,3.4.5.6,5.6.7.8,lb.example.com,9.9.9.9"
        );
        assert_eq!(lb(json!({}), json!(["9.9.9.9"]))[3], "9.9.9.9");
        // ExternalName prints the name.
        let ext = row_of::<Service>(service(
            json!({"type": "ExternalName", "externalName": "db.example.com"}),
            json!({}),
        ));
        assert_eq!(ext[2], "<none>");
        assert_eq!(ext[3], "db.example.com");
    }
}
