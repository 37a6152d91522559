//! The checks only the restricted level runs (baseline's checks run there too, less the
//! ones these replace): no privilege escalation, capabilities dropped, non-root users, and
//! only the volume types that expose nothing of the node.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{
    Outcome, added, containers, containers_named, forbid, join_quote, names_where, pluralize,
    setters, user_namespaced, windows,
};

pub fn capabilities_restricted_1_22(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let mut missing_drop_all = Vec::new();
    let mut adding = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let Some(capabilities) = c.security_context.and_then(|s| s.capabilities.as_ref()) else {
            missing_drop_all.push(c.name);
            continue;
        };
        if !capabilities.drop.iter().flatten().any(|d| d == "ALL") {
            missing_drop_all.push(c.name);
        }
        let extra: Vec<&String> = added(&c)
            .iter()
            .filter(|cap| *cap != "NET_BIND_SERVICE")
            .collect();
        if !extra.is_empty() {
            adding.push(c.name);
            caps.extend(extra);
        }
    }
    let mut details = Vec::new();
    if !missing_drop_all.is_empty() {
        details.push(format!(
            r#"{} must set securityContext.capabilities.drop=["ALL"]"#,
            containers_named(&missing_drop_all)
        ));
    }
    if !adding.is_empty() {
        let caps: Vec<&String> = caps.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&adding),
            join_quote(&caps)
        ));
    }
    if details.is_empty() {
        return None;
    }
    forbid("unrestricted capabilities", details.join("; "))
}

/// From 1.25, a pod that says it runs on Windows skips the Linux-only restricted checks.
pub fn capabilities_restricted(meta: &ObjectMeta, spec: &PodSpec) -> Outcome {
    if windows(spec) {
        return None;
    }
    capabilities_restricted_1_22(meta, spec)
}

pub fn allow_privilege_escalation_1_8(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let bad = names_where(spec, |c| {
        c.security_context
            .and_then(|s| s.allow_privilege_escalation)
            != Some(false)
    });
    if bad.is_empty() {
        return None;
    }
    forbid(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_named(&bad)
        ),
    )
}

pub fn allow_privilege_escalation_1_25(meta: &ObjectMeta, spec: &PodSpec) -> Outcome {
    if windows(spec) {
        return None;
    }
    allow_privilege_escalation_1_8(meta, spec)
}

pub fn run_as_non_root_1_0(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let mut pod_non_root = false;
    let mut pod_bad = false;
    match spec
        .security_context
        .as_ref()
        .and_then(|s| s.run_as_non_root)
    {
        Some(false) => pod_bad = true,
        Some(true) => pod_non_root = true,
        None => {}
    }
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in containers(spec) {
        match c.security_context.and_then(|s| s.run_as_non_root) {
            Some(false) => explicit.push(c.name),
            Some(true) => {}
            None if !pod_non_root => implicit.push(c.name),
            None => {}
        }
    }
    let setters = setters(pod_bad, &explicit);
    if !setters.is_empty() {
        return forbid(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters.join(" and ")
            ),
        );
    }
    if !implicit.is_empty() {
        return forbid(
            "runAsNonRoot != true",
            format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_named(&implicit)
            ),
        );
    }
    None
}

pub fn run_as_non_root_1_35(meta: &ObjectMeta, spec: &PodSpec) -> Outcome {
    if user_namespaced(spec) {
        return None;
    }
    run_as_non_root_1_0(meta, spec)
}

pub fn run_as_user_1_23(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let pod = spec.security_context.as_ref().and_then(|s| s.run_as_user) == Some(0);
    let bad = names_where(spec, |c| {
        c.security_context.and_then(|s| s.run_as_user) == Some(0)
    });
    let setters = setters(pod, &bad);
    if setters.is_empty() {
        return None;
    }
    forbid(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", setters.join(" and ")),
    )
}

pub fn run_as_user_1_35(meta: &ObjectMeta, spec: &PodSpec) -> Outcome {
    if user_namespaced(spec) {
        return None;
    }
    run_as_user_1_23(meta, spec)
}

/// The volume types a restricted pod may use, and upstream's name of each other one.
pub fn restricted_volumes(_: &ObjectMeta, spec: &PodSpec) -> Outcome {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for v in spec.volumes.iter().flatten() {
        let allowed = v.config_map.is_some()
            || v.csi.is_some()
            || v.downward_api.is_some()
            || v.empty_dir.is_some()
            || v.ephemeral.is_some()
            || v.image.is_some()
            || v.persistent_volume_claim.is_some()
            || v.projected.is_some()
            || v.secret.is_some();
        if allowed {
            continue;
        }
        bad.push(v.name.as_str());
        let kinds = [
            (v.host_path.is_some(), "hostPath"),
            (v.gce_persistent_disk.is_some(), "gcePersistentDisk"),
            (v.aws_elastic_block_store.is_some(), "awsElasticBlockStore"),
            (v.git_repo.is_some(), "gitRepo"),
            (v.nfs.is_some(), "nfs"),
            (v.iscsi.is_some(), "iscsi"),
            (v.glusterfs.is_some(), "glusterfs"),
            (v.rbd.is_some(), "rbd"),
            (v.flex_volume.is_some(), "flexVolume"),
            (v.cinder.is_some(), "cinder"),
            (v.cephfs.is_some(), "cephfs"),
            (v.flocker.is_some(), "flocker"),
            (v.fc.is_some(), "fc"),
            (v.azure_file.is_some(), "azureFile"),
            (v.vsphere_volume.is_some(), "vsphereVolume"),
            (v.quobyte.is_some(), "quobyte"),
            (v.azure_disk.is_some(), "azureDisk"),
            (v.photon_persistent_disk.is_some(), "photonPersistentDisk"),
            (v.portworx_volume.is_some(), "portworxVolume"),
            (v.scale_io.is_some(), "scaleIO"),
            (v.storageos.is_some(), "storageos"),
        ];
        let kind = kinds
            .iter()
            .find(|(set, _)| *set)
            .map_or("unknown", |(_, name)| name);
        types.insert(kind);
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<&str> = types.into_iter().collect();
    forbid(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
    )
}
