//! Ephemeral containers: containers added to a running pod to debug it (`kubectl debug`),
//! through the `ephemeralcontainers` subresource only. They are never restarted and have
//! no ports, probes or resources of their own, so they cannot change how the pod is
//! scheduled or served; once added they stay as they are for the pod's life, which is why
//! a write may only add them (upstream's ValidatePodEphemeralContainersUpdate).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{EphemeralContainer, Pod, PodSpec};

use crate::validation::{ErrorKind, Errors, FieldError, Path, dns1123_label};

/// A write of the subresource: everything but the ephemeral containers stays as stored.
pub fn keep_all_but_ephemeral_containers(new: &mut Pod, old: &Pod) {
    let added = new
        .spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.clone());
    let metadata = std::mem::take(&mut new.metadata);
    *new = old.clone();
    new.metadata = metadata;
    if let Some(spec) = new.spec.as_mut() {
        spec.ephemeral_containers = added;
    }
}

/// The fields an ephemeral container may not set, as upstream names them.
fn forbidden_fields(c: &EphemeralContainer) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut check = |set: bool, name: &'static str| {
        if set {
            out.push(name);
        }
    };
    check(c.ports.as_ref().is_some_and(|p| !p.is_empty()), "ports");
    check(c.liveness_probe.is_some(), "livenessProbe");
    check(c.readiness_probe.is_some(), "readinessProbe");
    check(c.startup_probe.is_some(), "startupProbe");
    check(c.lifecycle.is_some(), "lifecycle");
    check(
        c.resources.as_ref().is_some_and(|r| {
            r.limits.as_ref().is_some_and(|l| !l.is_empty())
                || r.requests.as_ref().is_some_and(|l| !l.is_empty())
        }),
        "resources",
    );
    check(
        c.resize_policy.as_ref().is_some_and(|p| !p.is_empty()),
        "resizePolicy",
    );
    check(c.restart_policy.is_some(), "restartPolicy");
    out
}

/// upstream's validateEphemeralContainers.
fn validate_ephemeral_containers(spec: &PodSpec, path: &Path, errs: &mut Errors) {
    let mut names: BTreeSet<&str> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| c.name.as_str())
        .collect();
    let targets = names.clone();
    let list = path.child("ephemeralContainers");
    for (i, c) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let p = list.index(i);
        if c.name.is_empty() {
            errs.push(FieldError::required(&p.child("name"), ""));
        } else {
            for msg in dns1123_label(&c.name) {
                errs.push(FieldError::invalid(&p.child("name"), &c.name, msg));
            }
            if !names.insert(c.name.as_str()) {
                errs.push(FieldError::duplicate(&p.child("name"), &c.name));
            }
        }
        if c.image.as_deref().is_none_or(|i| i.trim().is_empty()) {
            errs.push(FieldError::required(&p.child("image"), ""));
        }
        for field in forbidden_fields(c) {
            errs.push(FieldError::forbidden(
                &p.child(field),
                "cannot be set for an Ephemeral Container",
            ));
        }
        if let Some(target) = c.target_container_name.as_deref()
            && !targets.contains(target)
        {
            errs.push(FieldError::new(
                ErrorKind::NotFound,
                &p.child("targetContainerName"),
                Some(format!("{target:?}")),
                "",
            ));
        }
    }
}

/// A write of the subresource: new ephemeral containers are valid, and those already there
/// are neither changed nor removed.
pub fn validate_update(new: &Pod, old: &Pod, errs: &mut Errors) {
    let (Some(spec), Some(old_spec)) = (&new.spec, &old.spec) else {
        return;
    };
    let path = Path::new("spec");
    validate_ephemeral_containers(spec, &path, errs);
    let current = spec.ephemeral_containers.as_deref().unwrap_or_default();
    for existing in old_spec.ephemeral_containers.iter().flatten() {
        match current.iter().find(|c| c.name == existing.name) {
            None => errs.push(FieldError::forbidden(
                &path.child("ephemeralContainers"),
                format!(
                    "existing ephemeral containers {:?} may not be removed\n",
                    existing.name
                ),
            )),
            Some(c) if c != existing => errs.push(FieldError::forbidden(
                &path.child("ephemeralContainers"),
                format!(
                    "existing ephemeral containers {:?} may not be changed\n",
                    existing.name
                ),
            )),
            Some(_) => {}
        }
    }
}

/// Pods are created without ephemeral containers (upstream's ValidatePodCreate).
pub fn validate_create(spec: &PodSpec, errs: &mut Errors) {
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        errs.push(FieldError::forbidden(
            &Path::new("spec").child("ephemeralContainers"),
            "cannot be set on create",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ephemeral: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "app", "image": "busybox"}],
                     "ephemeralContainers": ephemeral},
        }))
        .unwrap()
    }

    fn messages(new: &Pod, old: &Pod) -> Vec<String> {
        let mut errs = Vec::new();
        validate_update(new, old, &mut errs);
        errs.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn only_additions() {
        let none = pod(json!(null));
        let one = pod(
            json!([{"name": "debugger", "image": "busybox:1.36", "targetContainerName": "app"}]),
        );
        assert!(messages(&one, &none).is_empty());
        let changed = pod(
            json!([{"name": "debugger", "image": "busybox:1.37", "targetContainerName": "app"}]),
        );
        assert_eq!(
            messages(&changed, &one),
            vec![
                "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"debugger\" may not be changed\n"
            ]
        );
        assert_eq!(
            messages(&none, &one),
            vec![
                "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"debugger\" may not be removed\n"
            ]
        );
    }

    #[test]
    fn ephemeral_container_rules() {
        let none = pod(json!(null));
        let bad = pod(json!([
            {"name": "app", "image": "busybox"},
            {"name": "d", "ports": [{"containerPort": 80}], "targetContainerName": "nope"},
        ]));
        assert_eq!(
            messages(&bad, &none),
            vec![
                "spec.ephemeralContainers[0].name: Duplicate value: \"app\"",
                "spec.ephemeralContainers[1].image: Required value",
                "spec.ephemeralContainers[1].ports: Forbidden: cannot be set for an Ephemeral Container",
                "spec.ephemeralContainers[1].targetContainerName: Not found: \"nope\"",
            ]
        );
        let mut errs = Vec::new();
        validate_create(bad.spec.as_ref().unwrap(), &mut errs);
        assert_eq!(
            errs[0].to_string(),
            "spec.ephemeralContainers: Forbidden: cannot be set on create"
        );
    }

    #[test]
    fn only_ephemeral_containers_are_written() {
        let old = pod(json!(null));
        let mut new = pod(json!([{"name": "d", "image": "busybox"}]));
        new.spec.as_mut().unwrap().containers[0].image = Some("other".into());
        keep_all_but_ephemeral_containers(&mut new, &old);
        let spec = new.spec.unwrap();
        assert_eq!(spec.containers[0].image.as_deref(), Some("busybox"));
        assert_eq!(spec.ephemeral_containers.unwrap()[0].name, "d");
    }
}
