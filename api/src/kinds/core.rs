//! The core/v1 kinds other than Pod: their defaults, strategies and validation.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Event, Namespace, NamespaceSpec, NamespaceStatus, Node, PersistentVolume,
    PersistentVolumeClaim, PersistentVolumeStatus, Secret, Service, ServiceAccount, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::kinds::pod::is_port_name;
use crate::spec_and_status;
use crate::strategy::{GcPolicy, Kind};
use crate::validation::{Errors, FieldError, Path, dns1123_subdomain, immutable, qualified_name};

impl Kind for Namespace {
    const FIELDS: &'static [&'static str] = &["status.phase"];
    const RETURN_DELETED: bool = true;

    fn default_fields(&mut self) {
        if let Some(name) = self.metadata.name.clone() {
            self.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert("kubernetes.io/metadata.name".into(), name);
        }
        let status = self.status.get_or_insert_with(NamespaceStatus::default);
        status.phase.get_or_insert_with(|| "Active".into());
    }

    fn prepare_create(&mut self) {
        self.status = Some(NamespaceStatus {
            phase: Some("Active".into()),
            ..Default::default()
        });
        let finalizers = self
            .spec
            .get_or_insert_with(NamespaceSpec::default)
            .finalizers
            .get_or_insert_with(Vec::new);
        if !finalizers.iter().any(|f| f == "kubernetes") {
            finalizers.push("kubernetes".into());
        }
    }

    fn keep_status(&mut self, old: &Self) {
        self.status = old.status.clone();
        // spec.finalizers changes only through the finalize subresource.
        self.spec = old.spec.clone();
    }

    fn keep_spec(&mut self, old: &Self) {
        self.spec = old.spec.clone();
    }

    fn validate(&self, errs: &mut Errors) {
        for (i, f) in self
            .spec
            .iter()
            .flat_map(|s| s.finalizers.iter().flatten())
            .enumerate()
        {
            for e in qualified_name(f) {
                errs.push(FieldError::invalid(
                    &Path::new("spec").child("finalizers").index(i),
                    f,
                    e,
                ));
            }
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        match name {
            "status.phase" => self.status.as_ref().and_then(|s| s.phase.clone()),
            _ => None,
        }
    }

    fn begin_delete(&mut self) -> bool {
        self.status.get_or_insert_with(Default::default).phase = Some("Terminating".into());
        !self.finalized()
    }

    fn finalized(&self) -> bool {
        self.spec
            .as_ref()
            .and_then(|s| s.finalizers.as_ref())
            .is_none_or(|f| f.is_empty())
    }

    fn deletion_forbidden(&self) -> Option<&'static str> {
        match self.metadata.name.as_deref() {
            Some("default" | "kube-system" | "kube-public") => {
                Some("this namespace may not be deleted")
            }
            _ => None,
        }
    }
}

const SERVICE_TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];

impl Kind for Service {
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

impl Kind for Endpoints {
    const CREATE_ON_UPDATE: bool = true;

    fn default_fields(&mut self) {
        for s in self.subsets.iter_mut().flatten() {
            for p in s.ports.iter_mut().flatten() {
                p.protocol.get_or_insert_with(|| "TCP".into());
            }
        }
    }

    fn validate(&self, errs: &mut Errors) {
        for (i, s) in self.subsets.iter().flatten().enumerate() {
            let sp = Path::new("subsets").index(i);
            for (j, a) in s
                .addresses
                .iter()
                .flatten()
                .chain(s.not_ready_addresses.iter().flatten())
                .enumerate()
            {
                if a.ip.parse::<std::net::IpAddr>().is_err() {
                    errs.push(FieldError::invalid(
                        &sp.child("addresses").index(j).child("ip"),
                        &a.ip,
                        "must be a valid IP address",
                    ));
                }
            }
            for (j, p) in s.ports.iter().flatten().enumerate() {
                if !(1..=65535).contains(&p.port) {
                    errs.push(FieldError::invalid(
                        &sp.child("ports").index(j).child("port"),
                        p.port,
                        "must be between 1 and 65535, inclusive",
                    ));
                }
            }
        }
    }
}

impl Kind for ConfigMap {
    fn default_fields(&mut self) {
        self.data.get_or_insert_with(BTreeMap::new);
    }

    fn validate(&self, errs: &mut Errors) {
        let mut total = 0;
        for (k, v) in self.data.iter().flatten() {
            validate_config_key(k, &Path::new("data"), errs);
            total += v.len();
        }
        for (k, v) in self.binary_data.iter().flatten() {
            validate_config_key(k, &Path::new("binaryData"), errs);
            if self.data.as_ref().is_some_and(|d| d.contains_key(k)) {
                errs.push(FieldError::invalid(
                    &Path::new("data").key(k),
                    k,
                    "duplicate of key present in binaryData",
                ));
            }
            total += v.0.len();
        }
        if total > 1024 * 1024 {
            errs.push(FieldError::too_long(&Path::new(""), 1024 * 1024));
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if old.immutable == Some(true) {
            if self.immutable != Some(true) {
                errs.push(FieldError::forbidden(
                    &Path::new("immutable"),
                    "field is immutable when `immutable` is set",
                ));
            }
            if self.data != old.data {
                errs.push(FieldError::forbidden(
                    &Path::new("data"),
                    "field is immutable when `immutable` is set",
                ));
            }
            if self.binary_data != old.binary_data {
                errs.push(FieldError::forbidden(
                    &Path::new("binaryData"),
                    "field is immutable when `immutable` is set",
                ));
            }
        }
    }
}

/// ConfigMap and Secret keys: `[-._a-zA-Z0-9]+`, not `.` or `..`, at most 253 bytes.
fn validate_config_key(k: &str, path: &Path, errs: &mut Errors) {
    let ok = !k.is_empty()
        && k.len() <= 253
        && k != "."
        && k != ".."
        && !k.starts_with("..")
        && k.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.');
    if !ok {
        errs.push(FieldError::invalid(
            &path.key(k),
            k,
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
        ));
    }
}

impl Kind for Secret {
    const FIELDS: &'static [&'static str] = &["type"];

    fn default_fields(&mut self) {
        self.type_.get_or_insert_with(|| "Opaque".into());
        fold_string_data(self);
    }

    fn validate(&self, errs: &mut Errors) {
        let mut total = 0;
        for (k, v) in self.data.iter().flatten() {
            validate_config_key(k, &Path::new("data"), errs);
            total += v.0.len();
        }
        for (k, v) in self.string_data.iter().flatten() {
            validate_config_key(k, &Path::new("stringData"), errs);
            total += v.len();
        }
        if total > 1024 * 1024 {
            errs.push(FieldError::too_long(&Path::new("data"), 1024 * 1024));
        }
        let has = |k: &str| {
            self.data.as_ref().is_some_and(|d| d.contains_key(k))
                || self.string_data.as_ref().is_some_and(|d| d.contains_key(k))
        };
        match self.type_.as_deref() {
            Some("kubernetes.io/tls") => {
                for k in ["tls.crt", "tls.key"] {
                    if !has(k) {
                        errs.push(FieldError::required(&Path::new("data").key(k), ""));
                    }
                }
            }
            Some("kubernetes.io/dockerconfigjson") if !has(".dockerconfigjson") => {
                errs.push(FieldError::required(
                    &Path::new("data").key(".dockerconfigjson"),
                    "",
                ));
            }
            Some("kubernetes.io/basic-auth") if !has("username") && !has("password") => {
                errs.push(FieldError::required(&Path::new("data").key("username"), ""));
            }
            Some("kubernetes.io/ssh-auth") if !has("ssh-privatekey") => {
                errs.push(FieldError::required(
                    &Path::new("data").key("ssh-privatekey"),
                    "",
                ));
            }
            _ => {}
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        immutable(&self.type_, &old.type_, &Path::new("type"), errs);
        if old.immutable == Some(true) {
            if self.immutable != Some(true) {
                errs.push(FieldError::forbidden(
                    &Path::new("immutable"),
                    "field is immutable when `immutable` is set",
                ));
            }
            if self.data != old.data {
                errs.push(FieldError::forbidden(
                    &Path::new("data"),
                    "field is immutable when `immutable` is set",
                ));
            }
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        match name {
            "type" => self.type_.clone(),
            _ => None,
        }
    }
}

/// `stringData` is write-only: it is merged into `data` and never stored.
fn fold_string_data(s: &mut Secret) {
    if let Some(sd) = s.string_data.take() {
        let data = s.data.get_or_insert_with(BTreeMap::new);
        for (k, v) in sd {
            data.insert(k, k8s_openapi::ByteString(v.into_bytes()));
        }
    }
}

impl Kind for Node {
    const FIELDS: &'static [&'static str] = &["spec.unschedulable"];

    spec_and_status!();

    fn default_fields(&mut self) {
        if let Some(status) = self.status.as_mut()
            && status.allocatable.is_none()
        {
            status.allocatable = status.capacity.clone();
        }
    }

    fn validate(&self, errs: &mut Errors) {
        for (i, t) in self
            .spec
            .iter()
            .flat_map(|s| s.taints.iter().flatten())
            .enumerate()
        {
            let p = Path::new("spec").child("taints").index(i);
            for e in qualified_name(&t.key) {
                errs.push(FieldError::invalid(&p.child("key"), &t.key, e));
            }
            if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&t.effect.as_str()) {
                errs.push(FieldError::not_supported(
                    &p.child("effect"),
                    &t.effect,
                    &["NoExecute", "NoSchedule", "PreferNoSchedule"],
                ));
            }
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        match name {
            "spec.unschedulable" => Some(
                self.spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false)
                    .to_string(),
            ),
            _ => None,
        }
    }
}

impl Kind for Event {
    const FIELDS: &'static [&'static str] = &[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ];
    const CREATE_ON_UPDATE: bool = true;
    const GC_POLICY: GcPolicy = GcPolicy::Unsupported;

    fn validate(&self, errs: &mut Errors) {
        if self.event_time.is_none() {
            let event_ns = self.metadata.namespace.as_deref().unwrap_or("");
            let involved_ns = self.involved_object.namespace.as_deref().unwrap_or("");
            let ok = if involved_ns.is_empty() {
                event_ns.is_empty() || event_ns == "default"
            } else {
                involved_ns == event_ns
            };
            if !ok {
                errs.push(FieldError::invalid(
                    &Path::new("involvedObject").child("namespace"),
                    involved_ns,
                    "does not match event.namespace",
                ));
            }
        } else {
            for (name, v) in [
                ("reportingController", &self.reporting_component),
                ("reportingInstance", &self.reporting_instance),
                ("action", &self.action),
                ("reason", &self.reason),
            ] {
                if v.as_deref().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(&Path::new(name), ""));
                }
            }
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        let o = &self.involved_object;
        match name {
            "involvedObject.kind" => o.kind.clone(),
            "involvedObject.namespace" => o.namespace.clone(),
            "involvedObject.name" => o.name.clone(),
            "involvedObject.uid" => o.uid.clone(),
            "involvedObject.apiVersion" => o.api_version.clone(),
            "involvedObject.resourceVersion" => o.resource_version.clone(),
            "involvedObject.fieldPath" => o.field_path.clone(),
            "reason" => self.reason.clone(),
            "reportingComponent" => self.reporting_component.clone(),
            "source" => self.source.as_ref().and_then(|s| s.component.clone()),
            "type" => self.type_.clone(),
            _ => None,
        }
    }
}

impl Kind for ServiceAccount {
    const RETURN_DELETED: bool = true;
}

const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

impl Kind for PersistentVolume {
    const RETURN_DELETED: bool = true;

    spec_and_status!();

    fn default_fields(&mut self) {
        if let Some(spec) = self.spec.as_mut() {
            spec.persistent_volume_reclaim_policy
                .get_or_insert_with(|| "Retain".into());
            spec.volume_mode.get_or_insert_with(|| "Filesystem".into());
        }
        self.status
            .get_or_insert_with(Default::default)
            .phase
            .get_or_insert_with(|| "Pending".into());
    }

    fn prepare_create(&mut self) {
        self.status = Some(PersistentVolumeStatus {
            phase: Some("Pending".into()),
            last_phase_transition_time: Some(crate::meta::now()),
            ..Default::default()
        });
    }

    fn validate(&self, errs: &mut Errors) {
        let path = Path::new("spec");
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&path, ""));
            return;
        };
        match &spec.access_modes {
            None => errs.push(FieldError::required(&path.child("accessModes"), "")),
            Some(m) if m.is_empty() => {
                errs.push(FieldError::required(&path.child("accessModes"), ""))
            }
            Some(m) => {
                for mode in m {
                    if !ACCESS_MODES.contains(&mode.as_str()) {
                        errs.push(FieldError::not_supported(
                            &path.child("accessModes"),
                            mode,
                            ACCESS_MODES,
                        ));
                    }
                }
            }
        }
        match spec.capacity.as_ref().and_then(|c| c.get("storage")) {
            None => errs.push(FieldError::required(&path.child("capacity"), "")),
            Some(q) if crate::quantity::parse(&q.0).is_none_or(|v| v <= 0.0) => {
                errs.push(FieldError::invalid(
                    &path.child("capacity").key("storage"),
                    &q.0,
                    "must be greater than zero",
                ))
            }
            _ => {}
        }
        if let Some(p) = &spec.persistent_volume_reclaim_policy
            && !["Delete", "Recycle", "Retain"].contains(&p.as_str())
        {
            errs.push(FieldError::not_supported(
                &path.child("persistentVolumeReclaimPolicy"),
                p,
                &["Delete", "Recycle", "Retain"],
            ));
        }
        if let Some(h) = &spec.host_path
            && h.path.is_empty()
        {
            errs.push(FieldError::required(
                &path.child("hostPath").child("path"),
                "",
            ));
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if let (Some(n), Some(o)) = (&self.spec, &old.spec) {
            immutable(
                &n.host_path,
                &o.host_path,
                &Path::new("spec").child("persistentvolumesource"),
                errs,
            );
            immutable(
                &n.local,
                &o.local,
                &Path::new("spec").child("persistentvolumesource"),
                errs,
            );
            immutable(
                &n.volume_mode,
                &o.volume_mode,
                &Path::new("volumeMode"),
                errs,
            );
        }
    }
}

impl Kind for PersistentVolumeClaim {
    const RETURN_DELETED: bool = true;

    spec_and_status!();

    fn default_fields(&mut self) {
        if let Some(spec) = self.spec.as_mut() {
            spec.volume_mode.get_or_insert_with(|| "Filesystem".into());
        }
        self.status
            .get_or_insert_with(Default::default)
            .phase
            .get_or_insert_with(|| "Pending".into());
    }

    fn prepare_create(&mut self) {
        self.status = Some(Default::default());
        if let Some(spec) = self.spec.as_mut() {
            match (&spec.data_source, &spec.data_source_ref) {
                (Some(ds), None) => {
                    spec.data_source_ref = Some(k8s_openapi::api::core::v1::TypedObjectReference {
                        api_group: ds.api_group.clone(),
                        kind: ds.kind.clone(),
                        name: ds.name.clone(),
                        namespace: None,
                    })
                }
                (None, Some(r)) if r.namespace.is_none() => {
                    spec.data_source = Some(k8s_openapi::api::core::v1::TypedLocalObjectReference {
                        api_group: r.api_group.clone(),
                        kind: r.kind.clone(),
                        name: r.name.clone(),
                    })
                }
                _ => {}
            }
        }
    }

    fn validate(&self, errs: &mut Errors) {
        let path = Path::new("spec");
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&path, ""));
            return;
        };
        match &spec.access_modes {
            Some(m) if !m.is_empty() => {
                for mode in m {
                    if !ACCESS_MODES.contains(&mode.as_str()) {
                        errs.push(FieldError::not_supported(
                            &path.child("accessModes"),
                            mode,
                            ACCESS_MODES,
                        ));
                    }
                }
            }
            _ => errs.push(FieldError::required(
                &path.child("accessModes"),
                "at least 1 access mode is required",
            )),
        }
        match spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
        {
            None => errs.push(FieldError::required(
                &path.child("resources").key("storage"),
                "",
            )),
            Some(q) if crate::quantity::parse(&q.0).is_none_or(|v| v <= 0.0) => {
                errs.push(FieldError::invalid(
                    &path.child("resources").key("storage"),
                    &q.0,
                    "must be greater than zero",
                ))
            }
            _ => {}
        }
        if let Some(sc) = spec.storage_class_name.as_deref().filter(|s| !s.is_empty()) {
            for e in dns1123_subdomain(sc) {
                errs.push(FieldError::invalid(&path.child("storageClassName"), sc, e));
            }
        }
        if let Some(m) = &spec.volume_mode
            && !["Block", "Filesystem"].contains(&m.as_str())
        {
            errs.push(FieldError::not_supported(
                &path.child("volumeMode"),
                m,
                &["Block", "Filesystem"],
            ));
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        let (Some(n), Some(o)) = (&self.spec, &old.spec) else {
            return;
        };
        let mut comparable = n.clone();
        comparable.resources = o.resources.clone();
        comparable.volume_attributes_class_name = o.volume_attributes_class_name.clone();
        if o.volume_name.as_deref().unwrap_or("").is_empty() {
            comparable.volume_name = o.volume_name.clone();
        }
        if o.storage_class_name.is_none() {
            comparable.storage_class_name = None;
        }
        if comparable != *o {
            errs.push(FieldError::forbidden(
                &Path::new("spec"),
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
            ));
        }
        let storage = |s: &k8s_openapi::api::core::v1::PersistentVolumeClaimSpec| {
            s.resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage"))
                .and_then(|q| crate::quantity::parse(&q.0))
        };
        if let (Some(new), Some(old_size)) = (storage(n), storage(o))
            && new < old_size
        {
            errs.push(FieldError::forbidden(
                &Path::new("spec")
                    .child("resources")
                    .child("requests")
                    .child("storage"),
                "field can not be less than previous value",
            ));
        }
    }
}
