//! The checks of the Pod Security Standards, one function per check and version as upstream's
//! `k8s.io/pod-security-admission/policy/check_*.go`. Each says why a pod is refused in two
//! parts: a short reason, always shown (and all that is shown when a whole namespace's pods
//! are summarised), and a detail naming the containers and values, shown for one pod. The
//! wording is upstream's, since clients and people match on it.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EphemeralContainer, Lifecycle, LifecycleHandler, PodSpec, Probe,
    SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Why one check refuses a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forbidden {
    pub reason: String,
    pub detail: String,
}

pub type Outcome = Option<Forbidden>;

fn forbid(reason: impl Into<String>, detail: impl Into<String>) -> Outcome {
    Some(Forbidden {
        reason: reason.into(),
        detail: detail.into(),
    })
}

/// `"a", "b"`.
fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(|s| format!("\"{}\"", s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn pluralize<'a>(singular: &'a str, plural: &'a str, count: usize) -> &'a str {
    if count == 1 { singular } else { plural }
}

/// `container "a"` or `containers "a", "b"`.
fn containers_named(names: &[&str]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

/// What the checks read of a container, the same for init, regular and ephemeral ones.
pub struct View<'a> {
    pub name: &'a str,
    pub security_context: Option<&'a SecurityContext>,
    pub ports: &'a [ContainerPort],
    pub probes: [Option<&'a Probe>; 3],
    pub lifecycle: Option<&'a Lifecycle>,
}

impl<'a> From<&'a Container> for View<'a> {
    fn from(c: &'a Container) -> Self {
        View {
            name: &c.name,
            security_context: c.security_context.as_ref(),
            ports: c.ports.as_deref().unwrap_or_default(),
            probes: [
                c.liveness_probe.as_ref(),
                c.readiness_probe.as_ref(),
                c.startup_probe.as_ref(),
            ],
            lifecycle: c.lifecycle.as_ref(),
        }
    }
}

impl<'a> From<&'a EphemeralContainer> for View<'a> {
    fn from(c: &'a EphemeralContainer) -> Self {
        View {
            name: &c.name,
            security_context: c.security_context.as_ref(),
            ports: c.ports.as_deref().unwrap_or_default(),
            probes: [
                c.liveness_probe.as_ref(),
                c.readiness_probe.as_ref(),
                c.startup_probe.as_ref(),
            ],
            lifecycle: c.lifecycle.as_ref(),
        }
    }
}

/// Every container of the pod in upstream's order: init, regular, then ephemeral.
pub fn containers(spec: &PodSpec) -> Vec<View<'_>> {
    let init = spec.init_containers.iter().flatten().map(View::from);
    let regular = spec.containers.iter().map(View::from);
    let ephemeral = spec.ephemeral_containers.iter().flatten().map(View::from);
    init.chain(regular).chain(ephemeral).collect()
}

fn windows(spec: &PodSpec) -> bool {
    spec.os.as_ref().is_some_and(|os| os.name == "windows")
}

/// A pod in a user namespace (`hostUsers: false`) is relaxed by some checks from 1.35 on.
fn user_namespaced(spec: &PodSpec) -> bool {
    spec.host_users == Some(false)
}

/// The names of the containers `bad` picks out.
fn names_where<'a>(spec: &'a PodSpec, bad: impl Fn(&View<'a>) -> bool) -> Vec<&'a str> {
    containers(spec)
        .into_iter()
        .filter(|c| bad(c))
        .map(|c| c.name)
        .collect()
}

/// `pod`, `containers "a", "b"`, or `pod and containers "a", "b"`.
fn setters(pod: bool, containers: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    if pod {
        out.push("pod".to_string());
    }
    if !containers.is_empty() {
        out.push(containers_named(containers));
    }
    out
}

pub fn host_process(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let on = |o: Option<&k8s_openapi::api::core::v1::WindowsSecurityContextOptions>| {
        o.and_then(|o| o.host_process) == Some(true)
    };
    let bad = names_where(spec, |c| {
        on(c.security_context.and_then(|s| s.windows_options.as_ref()))
    });
    let pod = on(spec
        .security_context
        .as_ref()
        .and_then(|s| s.windows_options.as_ref()));
    let setters = setters(pod, &bad);
    if setters.is_empty() {
        return None;
    }
    forbid(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters.join(" and ")
        ),
    )
}

pub fn host_namespaces(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let set: Vec<&str> = [
        (spec.host_network, "hostNetwork=true"),
        (spec.host_pid, "hostPID=true"),
        (spec.host_ipc, "hostIPC=true"),
    ]
    .into_iter()
    .filter(|(on, _)| *on == Some(true))
    .map(|(_, s)| s)
    .collect();
    if set.is_empty() {
        return None;
    }
    forbid("host namespaces", set.join(", "))
}

pub fn privileged(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let bad = names_where(spec, |c| {
        c.security_context.and_then(|s| s.privileged) == Some(true)
    });
    if bad.is_empty() {
        return None;
    }
    forbid(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_named(&bad)
        ),
    )
}

const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn added<'a>(c: &View<'a>) -> &'a [String] {
    c.security_context
        .and_then(|s| s.capabilities.as_ref())
        .and_then(|c| c.add.as_deref())
        .unwrap_or_default()
}

pub fn capabilities_baseline(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let mut caps = BTreeSet::new();
    let mut bad = Vec::new();
    for c in containers(spec) {
        let extra: Vec<&String> = added(&c)
            .iter()
            .filter(|cap| !BASELINE_CAPABILITIES.contains(&cap.as_str()))
            .collect();
        if !extra.is_empty() {
            bad.push(c.name);
            caps.extend(extra);
        }
    }
    if bad.is_empty() {
        return None;
    }
    let caps: Vec<&String> = caps.into_iter().collect();
    forbid(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&bad),
            join_quote(&caps)
        ),
    )
}

pub fn host_path_volumes(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let bad: Vec<&str> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.host_path.is_some())
        .map(|v| v.name.as_str())
        .collect();
    if bad.is_empty() {
        return None;
    }
    forbid(
        "hostPath volumes",
        format!(
            "{} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad)
        ),
    )
}

pub fn host_ports(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let mut ports = BTreeSet::new();
    let mut bad = Vec::new();
    for c in containers(spec) {
        let used: Vec<String> = c
            .ports
            .iter()
            .filter_map(|p| p.host_port.filter(|p| *p != 0))
            .map(|p| p.to_string())
            .collect();
        if !used.is_empty() {
            bad.push(c.name);
            ports.extend(used);
        }
    }
    if bad.is_empty() {
        return None;
    }
    // Sorted as strings, as upstream's string set.
    let ports: Vec<String> = ports.into_iter().collect();
    forbid(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_named(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

fn probe_hosts(probe: Option<&Probe>) -> Vec<String> {
    let Some(p) = probe else { return Vec::new() };
    let http = p.http_get.as_ref().and_then(|h| h.host.clone());
    let tcp = p.tcp_socket.as_ref().and_then(|t| t.host.clone());
    [http, tcp]
        .into_iter()
        .flatten()
        .filter(|h| !h.is_empty())
        .collect()
}

fn handler_hosts(handler: Option<&LifecycleHandler>) -> Vec<String> {
    let Some(h) = handler else { return Vec::new() };
    let http = h.http_get.as_ref().and_then(|h| h.host.clone());
    let tcp = h.tcp_socket.as_ref().and_then(|t| t.host.clone());
    [http, tcp]
        .into_iter()
        .flatten()
        .filter(|h| !h.is_empty())
        .collect()
}

pub fn host_probes_and_lifecycle(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let mut bad = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    for c in containers(spec) {
        let mut found: Vec<String> = c.probes.iter().flat_map(|p| probe_hosts(*p)).collect();
        if let Some(l) = c.lifecycle {
            found.extend(handler_hosts(l.post_start.as_ref()));
            found.extend(handler_hosts(l.pre_stop.as_ref()));
        }
        if !found.is_empty() {
            bad.insert(c.name);
            hosts.extend(found);
        }
    }
    if bad.is_empty() {
        return None;
    }
    let bad: Vec<&str> = bad.into_iter().collect();
    let hosts: Vec<String> = hosts.into_iter().collect();
    forbid(
        "probe or lifecycle host",
        format!(
            "{} {} {} {}",
            containers_named(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize(
                "probe or lifecycle host",
                "probe or lifecycle hosts",
                hosts.len()
            ),
            join_quote(&hosts)
        ),
    )
}

const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

pub fn app_armor(meta: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let allowed = |t: &str| t == "RuntimeDefault" || t == "Localhost";
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    if let Some(p) = spec
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.as_ref())
        .filter(|p| !allowed(&p.type_))
    {
        setters.push("pod".to_string());
        values.insert(p.type_.clone());
    }
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(p) = c
            .security_context
            .and_then(|s| s.app_armor_profile.as_ref())
            .filter(|p| !allowed(&p.type_))
        {
            bad.push(c.name);
            values.insert(p.type_.clone());
        }
    }
    if !bad.is_empty() {
        setters.push(containers_named(&bad));
    }
    let mut annotations: Vec<String> = meta
        .annotations
        .iter()
        .flatten()
        .filter(|(k, v)| {
            k.starts_with(APPARMOR_ANNOTATION_PREFIX)
                && !(v.is_empty() || *v == "runtime/default" || v.starts_with("localhost/"))
        })
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    let mut values: Vec<String> = values.into_iter().collect();
    if !annotations.is_empty() {
        annotations.sort();
        setters.push(pluralize("annotation", "annotations", annotations.len()).to_string());
        values.extend(annotations);
    }
    if setters.is_empty() {
        return None;
    }
    forbid(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            values.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            setters.join(" and "),
            join_quote(&values)
        ),
    )
}

fn se_linux(spec: &PodSpec, allowed_types: &[&str]) -> Outcome {
    let mut types = BTreeSet::new();
    let (mut user, mut role) = (false, false);
    let mut valid = |o: &k8s_openapi::api::core::v1::SELinuxOptions| {
        let mut ok = true;
        let t = o.type_.as_deref().unwrap_or_default();
        if !allowed_types.contains(&t) {
            ok = false;
            types.insert(t.to_string());
        }
        if o.user.as_deref().is_some_and(|u| !u.is_empty()) {
            ok = false;
            user = true;
        }
        if o.role.as_deref().is_some_and(|r| !r.is_empty()) {
            ok = false;
            role = true;
        }
        ok
    };
    let pod = spec
        .security_context
        .as_ref()
        .and_then(|s| s.se_linux_options.as_ref())
        .is_some_and(|o| !valid(o));
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(o) = c.security_context.and_then(|s| s.se_linux_options.as_ref())
            && !valid(o)
        {
            bad.push(c.name);
        }
    }
    let setters = setters(pod, &bad);
    if setters.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !types.is_empty() {
        let types: Vec<String> = types.into_iter().collect();
        data.push(format!(
            "{} {}",
            pluralize("type", "types", types.len()),
            join_quote(&types)
        ));
    }
    if user {
        data.push("user may not be set".to_string());
    }
    if role {
        data.push("role may not be set".to_string());
    }
    forbid(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.join(" and "),
            data.join("; ")
        ),
    )
}

const SELINUX_TYPES_1_0: &[&str] = &["", "container_t", "container_init_t", "container_kvm_t"];

pub fn se_linux_1_0(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    se_linux(spec, SELINUX_TYPES_1_0)
}

pub fn se_linux_1_31(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    se_linux(
        spec,
        &[
            "",
            "container_t",
            "container_init_t",
            "container_kvm_t",
            "container_engine_t",
        ],
    )
}

/// Unmasked (or any but `Default`) /proc mounts.
pub fn proc_mount_1_0(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let mut types = BTreeSet::new();
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(t) = c
            .security_context
            .and_then(|s| s.proc_mount.as_deref())
            .filter(|t| *t != "Default")
        {
            bad.push(c.name);
            types.insert(t.to_string());
        }
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    forbid(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_named(&bad),
            join_quote(&types)
        ),
    )
}

pub fn proc_mount_1_35(meta: &ObjectMeta, spec: &PodSpec) -> Outcome {
    if user_namespaced(spec) {
        return None;
    }
    proc_mount_1_0(meta, spec)
}

const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
const SECCOMP_CONTAINER_ANNOTATION_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";

/// Before 1.19, seccomp was set by annotations.
pub fn seccomp_baseline_1_0(meta: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let valid =
        |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
    let annotations = meta.annotations.as_ref();
    let mut forbidden = BTreeSet::new();
    let mut look = |key: String| {
        if let Some(v) = annotations.and_then(|a| a.get(&key))
            && !valid(v)
        {
            forbidden.insert(format!("{key}={v:?}"));
        }
    };
    look(SECCOMP_POD_ANNOTATION.to_string());
    for c in containers(spec) {
        look(format!("{SECCOMP_CONTAINER_ANNOTATION_PREFIX}{}", c.name));
    }
    if forbidden.is_empty() {
        return None;
    }
    let forbidden: Vec<String> = forbidden.into_iter().collect();
    forbid(
        "seccompProfile",
        format!(
            "forbidden {} {}",
            pluralize("annotation", "annotations", forbidden.len()),
            forbidden.join(", ")
        ),
    )
}

fn valid_seccomp(t: &str) -> bool {
    t == "RuntimeDefault" || t == "Localhost"
}

/// Profiles set to something but RuntimeDefault or Localhost; with `required`, containers
/// that set none where the pod sets no valid one either.
fn seccomp_fields(spec: &PodSpec, required: bool) -> Outcome {
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let mut pod_set = false;
    if let Some(p) = spec
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref())
    {
        if valid_seccomp(&p.type_) {
            pod_set = true;
        } else {
            setters.push("pod".to_string());
            values.insert(p.type_.clone());
        }
    }
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in containers(spec) {
        match c.security_context.and_then(|s| s.seccomp_profile.as_ref()) {
            Some(p) if !valid_seccomp(&p.type_) => {
                explicit.push(c.name);
                values.insert(p.type_.clone());
            }
            Some(_) => {}
            None if !pod_set => implicit.push(c.name),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_named(&explicit));
    }
    if !setters.is_empty() {
        let values: Vec<String> = values.into_iter().collect();
        return forbid(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                join_quote(&values)
            ),
        );
    }
    if required && !implicit.is_empty() {
        return forbid(
            "seccompProfile",
            format!(
                r#"pod or {} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#,
                containers_named(&implicit)
            ),
        );
    }
    None
}

pub fn seccomp_baseline_1_19(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    seccomp_fields(spec, false)
}

pub fn seccomp_restricted_1_19(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    seccomp_fields(spec, true)
}

pub fn seccomp_restricted_1_25(meta: &ObjectMeta, spec: &PodSpec) -> Outcome {
    if windows(spec) {
        return None;
    }
    seccomp_restricted_1_19(meta, spec)
}

const SYSCTLS_1_0: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
];
const SYSCTLS_1_27: &[&str] = &["net.ipv4.ip_local_reserved_ports"];
const SYSCTLS_1_29: &[&str] = &[
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
const SYSCTLS_1_32: &[&str] = &["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"];
const SYSCTLS_1_37: &[&str] = &[
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_notsent_lowat",
];

/// The safe sysctls, each list adding to the one before.
fn sysctls(spec: &PodSpec, allowed: &[&[&str]]) -> Outcome {
    let bad: Vec<&str> = spec
        .security_context
        .iter()
        .flat_map(|s| s.sysctls.iter().flatten())
        .map(|s| s.name.as_str())
        .filter(|name| !allowed.iter().any(|set| set.contains(name)))
        .collect();
    if bad.is_empty() {
        return None;
    }
    forbid("forbidden sysctls", bad.join(", "))
}

pub fn sysctls_1_0(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    sysctls(spec, &[SYSCTLS_1_0])
}

pub fn sysctls_1_27(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    sysctls(spec, &[SYSCTLS_1_0, SYSCTLS_1_27])
}

pub fn sysctls_1_29(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    sysctls(spec, &[SYSCTLS_1_0, SYSCTLS_1_27, SYSCTLS_1_29])
}

pub fn sysctls_1_32(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    sysctls(
        spec,
        &[SYSCTLS_1_0, SYSCTLS_1_27, SYSCTLS_1_29, SYSCTLS_1_32],
    )
}

pub fn sysctls_1_37(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let all = [
        SYSCTLS_1_0,
        SYSCTLS_1_27,
        SYSCTLS_1_29,
        SYSCTLS_1_32,
        SYSCTLS_1_37,
    ];
    sysctls(spec, &all)
}

mod restricted;
pub use restricted::*;

#[cfg(test)]
#[path = "checks_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "checks_fixtures.rs"]
mod fixtures;
