//! Pod validation (ValidatePodSpec and friends): the rules users break most, also applied to
//! the pod templates of workloads.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, ContainerPort, EnvVar, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::resources::validate_resource_requirements;
use crate::validation::{
    Errors, FieldError, Path, dns1123_label, dns1123_subdomain, validate_annotations,
    validate_labels,
};

const RESTART_POLICIES: &[&str] = &["Always", "OnFailure", "Never"];
const DNS_POLICIES: &[&str] = &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
const PULL_POLICIES: &[&str] = &["Always", "IfNotPresent", "Never"];
const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];

/// ValidatePodSpec: the rules a user is most likely to break.
pub fn validate_pod_spec(spec: &PodSpec, path: &Path, errs: &mut Errors) {
    let mut volume_names = BTreeSet::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let p = path.child("volumes").index(i);
        if v.name.is_empty() {
            errs.push(FieldError::required(&p.child("name"), ""));
        } else {
            for e in dns1123_label(&v.name) {
                errs.push(FieldError::invalid(&p.child("name"), &v.name, e));
            }
            if !volume_names.insert(v.name.clone()) {
                errs.push(FieldError::duplicate(&p.child("name"), &v.name));
            }
        }
        if let Some(h) = &v.host_path {
            if h.path.is_empty() {
                errs.push(FieldError::required(&p.child("hostPath").child("path"), ""));
            }
            let types = [
                "",
                "DirectoryOrCreate",
                "Directory",
                "FileOrCreate",
                "File",
                "Socket",
                "CharDevice",
                "BlockDevice",
            ];
            if let Some(t) = &h.type_
                && !types.contains(&t.as_str())
            {
                errs.push(FieldError::not_supported(
                    &p.child("hostPath").child("type"),
                    t,
                    &types,
                ));
            }
        }
        if let Some(s) = &v.secret
            && s.secret_name.as_deref().unwrap_or("").is_empty()
        {
            errs.push(FieldError::required(
                &p.child("secret").child("secretName"),
                "",
            ));
        }
        if let Some(c) = &v.config_map
            && c.name.is_empty()
        {
            errs.push(FieldError::required(
                &p.child("configMap").child("name"),
                "",
            ));
        }
    }
    if spec.containers.is_empty() {
        errs.push(FieldError::required(&path.child("containers"), ""));
    }
    let mut names = BTreeSet::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        validate_container(
            c,
            &path.child("initContainers").index(i),
            &volume_names,
            &mut names,
            errs,
        );
    }
    for (i, c) in spec.containers.iter().enumerate() {
        validate_container(
            c,
            &path.child("containers").index(i),
            &volume_names,
            &mut names,
            errs,
        );
    }
    if let Some(rp) = &spec.restart_policy
        && !RESTART_POLICIES.contains(&rp.as_str())
    {
        errs.push(FieldError::not_supported(
            &path.child("restartPolicy"),
            rp,
            RESTART_POLICIES,
        ));
    }
    if let Some(dp) = &spec.dns_policy
        && !DNS_POLICIES.contains(&dp.as_str())
    {
        errs.push(FieldError::not_supported(
            &path.child("dnsPolicy"),
            dp,
            DNS_POLICIES,
        ));
    }
    if let Some(g) = spec.termination_grace_period_seconds
        && g < 0
    {
        errs.push(FieldError::invalid(
            &path.child("terminationGracePeriodSeconds"),
            g,
            "must be greater than or equal to 0",
        ));
    }
    if let Some(a) = spec.active_deadline_seconds
        && a <= 0
    {
        errs.push(FieldError::invalid(
            &path.child("activeDeadlineSeconds"),
            a,
            "must be between 1 and 2147483647, inclusive",
        ));
    }
    if let Some(n) = &spec.node_name {
        for e in dns1123_subdomain(n) {
            errs.push(FieldError::invalid(&path.child("nodeName"), n, e));
        }
    }
    if let Some(sa) = &spec.service_account_name {
        for e in dns1123_subdomain(sa) {
            errs.push(FieldError::invalid(
                &path.child("serviceAccountName"),
                sa,
                e,
            ));
        }
    }
    if let Some(sel) = &spec.node_selector {
        validate_labels(sel, &path.child("nodeSelector"), errs);
    }
    if let Some(host) = &spec.hostname {
        for e in dns1123_label(host) {
            errs.push(FieldError::invalid(&path.child("hostname"), host, e));
        }
    }
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        let p = path.child("tolerations").index(i);
        let op = t.operator.as_deref().unwrap_or("Equal");
        if !matches!(op, "Equal" | "Exists") {
            errs.push(FieldError::not_supported(
                &p.child("operator"),
                op,
                &["Equal", "Exists"],
            ));
        }
        if op == "Exists" && t.value.as_deref().is_some_and(|v| !v.is_empty()) {
            errs.push(FieldError::invalid(
                &p.child("operator"),
                op,
                "value must be empty when `operator` is 'Exists'",
            ));
        }
        if let Some(effect) = &t.effect
            && !matches!(
                effect.as_str(),
                "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute"
            )
        {
            errs.push(FieldError::not_supported(
                &p.child("effect"),
                effect,
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            ));
        }
    }
}

fn validate_container(
    c: &Container,
    p: &Path,
    volumes: &BTreeSet<String>,
    names: &mut BTreeSet<String>,
    errs: &mut Errors,
) {
    if c.name.is_empty() {
        errs.push(FieldError::required(&p.child("name"), ""));
    } else {
        for e in dns1123_label(&c.name) {
            errs.push(FieldError::invalid(&p.child("name"), &c.name, e));
        }
        if !names.insert(c.name.clone()) {
            errs.push(FieldError::duplicate(&p.child("name"), &c.name));
        }
    }
    match c.image.as_deref() {
        None | Some("") => errs.push(FieldError::required(&p.child("image"), "")),
        Some(img) if img.trim() != img => errs.push(FieldError::invalid(
            &p.child("image"),
            img,
            "must not have leading or trailing whitespace",
        )),
        _ => {}
    }
    if let Some(pp) = &c.image_pull_policy
        && !PULL_POLICIES.contains(&pp.as_str())
    {
        errs.push(FieldError::not_supported(
            &p.child("imagePullPolicy"),
            pp,
            PULL_POLICIES,
        ));
    }
    if let Some(r) = &c.resources {
        validate_resource_requirements(r, &p.child("resources"), errs);
    }
    let mut port_names = BTreeSet::new();
    for (i, port) in c.ports.iter().flatten().enumerate() {
        validate_container_port(port, &p.child("ports").index(i), &mut port_names, errs);
    }
    for (i, e) in c.env.iter().flatten().enumerate() {
        validate_env(e, &p.child("env").index(i), errs);
    }
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let mp = p.child("volumeMounts").index(i);
        if m.name.is_empty() {
            errs.push(FieldError::required(&mp.child("name"), ""));
        } else if !volumes.contains(&m.name) {
            errs.push(FieldError::new(
                crate::validation::ErrorKind::NotSupported,
                &mp.child("name"),
                Some(format!("{:?}", m.name)),
                "",
            ));
        }
        if m.mount_path.is_empty() {
            errs.push(FieldError::required(&mp.child("mountPath"), ""));
        }
        if let Some(sub) = &m.sub_path
            && (sub.starts_with('/') || sub.split('/').any(|s| s == ".."))
        {
            errs.push(FieldError::invalid(
                &mp.child("subPath"),
                sub,
                "must be a relative path without '..'",
            ));
        }
    }
    for (name, probe) in [
        ("livenessProbe", &c.liveness_probe),
        ("readinessProbe", &c.readiness_probe),
        ("startupProbe", &c.startup_probe),
    ] {
        if let Some(probe) = probe {
            let pp = p.child(name);
            let handlers = [
                probe.exec.is_some(),
                probe.http_get.is_some(),
                probe.tcp_socket.is_some(),
                probe.grpc.is_some(),
            ]
            .into_iter()
            .filter(|b| *b)
            .count();
            if handlers == 0 {
                errs.push(FieldError::required(&pp, "must specify a handler type"));
            } else if handlers > 1 {
                errs.push(FieldError::forbidden(
                    &pp,
                    "may not specify more than 1 handler type",
                ));
            }
            if let Some(get) = &probe.http_get {
                validate_port_ref(&get.port, &pp.child("httpGet").child("port"), errs);
            }
            if let Some(tcp) = &probe.tcp_socket {
                validate_port_ref(&tcp.port, &pp.child("tcpSocket").child("port"), errs);
            }
            if name != "readinessProbe" && probe.success_threshold.is_some_and(|s| s != 1) {
                errs.push(FieldError::invalid(
                    &pp.child("successThreshold"),
                    probe.success_threshold.unwrap_or(1),
                    "must be 1",
                ));
            }
        }
    }
}

fn validate_port_ref(port: &IntOrString, p: &Path, errs: &mut Errors) {
    match port {
        IntOrString::Int(n) if !(1..=65535).contains(n) => errs.push(FieldError::invalid(
            p,
            n,
            "must be between 1 and 65535, inclusive",
        )),
        IntOrString::String(s) if !is_port_name(s) => errs.push(FieldError::invalid(
            p,
            s,
            "must contain at least one letter (a-z)",
        )),
        _ => {}
    }
}

/// IANA_SVC_NAME: at most 15 lower-case alphanumerics or '-', with a letter, no '--', no edge '-'.
pub fn is_port_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && s.bytes().any(|c| c.is_ascii_lowercase())
        && !s.contains("--")
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn validate_container_port(
    port: &ContainerPort,
    p: &Path,
    names: &mut BTreeSet<String>,
    errs: &mut Errors,
) {
    if let Some(name) = &port.name {
        if !is_port_name(name) {
            errs.push(FieldError::invalid(
                &p.child("name"),
                name,
                "must be no more than 15 characters, contain only lowercase alphanumerics or '-', at least one letter, and not begin or end with '-' or contain '--'",
            ));
        } else if !names.insert(name.clone()) {
            errs.push(FieldError::duplicate(&p.child("name"), name));
        }
    }
    if port.container_port == 0 {
        errs.push(FieldError::required(&p.child("containerPort"), ""));
    } else if !(1..=65535).contains(&port.container_port) {
        errs.push(FieldError::invalid(
            &p.child("containerPort"),
            port.container_port,
            "must be between 1 and 65535, inclusive",
        ));
    }
    if let Some(hp) = port.host_port
        && hp != 0
        && !(1..=65535).contains(&hp)
    {
        errs.push(FieldError::invalid(
            &p.child("hostPort"),
            hp,
            "must be between 1 and 65535, inclusive",
        ));
    }
    if let Some(proto) = &port.protocol
        && !PROTOCOLS.contains(&proto.as_str())
    {
        errs.push(FieldError::not_supported(
            &p.child("protocol"),
            proto,
            PROTOCOLS,
        ));
    }
}

fn validate_env(e: &EnvVar, p: &Path, errs: &mut Errors) {
    if e.name.is_empty() {
        errs.push(FieldError::required(&p.child("name"), ""));
    }
    if let Some(from) = &e.value_from {
        let n = [
            from.field_ref.is_some(),
            from.resource_field_ref.is_some(),
            from.config_map_key_ref.is_some(),
            from.secret_key_ref.is_some(),
        ]
        .into_iter()
        .filter(|b| *b)
        .count();
        let vp = p.child("valueFrom");
        if n == 0 {
            errs.push(FieldError::invalid(&vp, "", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"));
        } else if n > 1 {
            errs.push(FieldError::invalid(
                &vp,
                "",
                "may not have more than one field specified at a time",
            ));
        }
        if e.value.as_deref().is_some_and(|v| !v.is_empty()) {
            errs.push(FieldError::invalid(
                &vp,
                "",
                "may not be specified when `value` is not empty",
            ));
        }
    }
}

/// Validation of a pod template inside a workload.
pub fn validate_template(t: &PodTemplateSpec, path: &Path, errs: &mut Errors) {
    if let Some(meta) = &t.metadata {
        if let Some(l) = &meta.labels {
            validate_labels(l, &path.child("metadata").child("labels"), errs);
        }
        if let Some(a) = &meta.annotations {
            validate_annotations(a, &path.child("metadata").child("annotations"), errs);
        }
    }
    match &t.spec {
        None => errs.push(FieldError::required(&path.child("spec"), "")),
        Some(spec) => validate_pod_spec(spec, &path.child("spec"), errs),
    }
}
