//! The Secrets and ConfigMaps a pod names, as upstream's `VisitPodSecretNames` and
//! `VisitPodConfigmapNames` walk them over every kind of container: what a kubelet needs to
//! read for the pod, and what a node may not make a mirror pod name (NodeRestriction). One
//! walk, so that the rules that depend on it agree on what a pod refers to.

use k8s_openapi::api::core::v1::{Container, EnvFromSource, EnvVar, EphemeralContainer, PodSpec};

type Env = Option<Vec<EnvVar>>;
type EnvFrom = Option<Vec<EnvFromSource>>;

fn env_of(c: &Container) -> (&Env, &EnvFrom) {
    (&c.env, &c.env_from)
}

fn ephemeral_env_of(c: &EphemeralContainer) -> (&Env, &EnvFrom) {
    (&c.env, &c.env_from)
}

/// The env sources of every container: init, regular and ephemeral (upstream's
/// `AllContainers`).
fn envs(spec: &PodSpec) -> impl Iterator<Item = (&Env, &EnvFrom)> {
    spec.init_containers
        .iter()
        .flatten()
        .map(env_of)
        .chain(spec.containers.iter().map(env_of))
        .chain(
            spec.ephemeral_containers
                .iter()
                .flatten()
                .map(ephemeral_env_of),
        )
}

/// The names of the Secrets `spec` refers to, in upstream's order; empty names are skipped.
pub fn secret_names(spec: &PodSpec) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for s in spec.image_pull_secrets.iter().flatten() {
        out.push(&s.name);
    }
    for (env, env_from) in envs(spec) {
        for f in env_from.iter().flatten() {
            if let Some(s) = &f.secret_ref {
                out.push(&s.name);
            }
        }
        for e in env.iter().flatten() {
            if let Some(s) = e
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
            {
                out.push(&s.name);
            }
        }
    }
    for v in spec.volumes.iter().flatten() {
        let name = if let Some(a) = &v.azure_file {
            Some(a.secret_name.as_str())
        } else if let Some(c) = &v.cephfs {
            c.secret_ref.as_ref().map(|r| r.name.as_str())
        } else if let Some(c) = &v.cinder {
            c.secret_ref.as_ref().map(|r| r.name.as_str())
        } else if let Some(f) = &v.flex_volume {
            f.secret_ref.as_ref().map(|r| r.name.as_str())
        } else if let Some(p) = &v.projected {
            for source in p.sources.iter().flatten() {
                if let Some(s) = &source.secret {
                    out.push(&s.name);
                }
            }
            None
        } else if let Some(r) = &v.rbd {
            r.secret_ref.as_ref().map(|r| r.name.as_str())
        } else if let Some(s) = &v.secret {
            s.secret_name.as_deref()
        } else if let Some(s) = &v.scale_io {
            Some(s.secret_ref.name.as_str())
        } else if let Some(i) = &v.iscsi {
            i.secret_ref.as_ref().map(|r| r.name.as_str())
        } else if let Some(s) = &v.storageos {
            s.secret_ref.as_ref().map(|r| r.name.as_str())
        } else if let Some(c) = &v.csi {
            c.node_publish_secret_ref.as_ref().map(|r| r.name.as_str())
        } else {
            None
        };
        out.extend(name);
    }
    out.retain(|n| !n.is_empty());
    out
}

/// The names of the ConfigMaps `spec` refers to, in upstream's order; empty names are
/// skipped.
pub fn config_map_names(spec: &PodSpec) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for (env, env_from) in envs(spec) {
        for f in env_from.iter().flatten() {
            if let Some(c) = &f.config_map_ref {
                out.push(&c.name);
            }
        }
        for e in env.iter().flatten() {
            if let Some(c) = e
                .value_from
                .as_ref()
                .and_then(|v| v.config_map_key_ref.as_ref())
            {
                out.push(&c.name);
            }
        }
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(p) = &v.projected {
            for source in p.sources.iter().flatten() {
                if let Some(c) = &source.config_map {
                    out.push(&c.name);
                }
            }
        } else if let Some(c) = &v.config_map {
            out.push(&c.name);
        }
    }
    out.retain(|n| !n.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn every_container_and_volume_kind_is_visited() {
        let s = spec(json!({
            "imagePullSecrets": [{"name": "pull"}, {"name": ""}],
            "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "init-from"}}]}],
            "containers": [{"name": "c",
                "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "env", "key": "k"}}},
                        {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}}],
                "envFrom": [{"configMapRef": {"name": "cm-from"}}]}],
            "ephemeralContainers": [{"name": "e",
                "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "debug", "key": "k"}}}]}],
            "volumes": [
                {"name": "s", "secret": {"secretName": "vol"}},
                {"name": "a", "azureFile": {"secretName": "azure", "shareName": "x"}},
                {"name": "r", "rbd": {"monitors": ["m"], "image": "i", "secretRef": {"name": "rbd"}}},
                {"name": "i", "iscsi": {"targetPortal": "t", "iqn": "q", "lun": 0, "secretRef": {"name": "iscsi"}}},
                {"name": "x", "scaleIO": {"gateway": "g", "system": "s", "secretRef": {"name": "scaleio"}}},
                {"name": "d", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi"}}},
                {"name": "p", "projected": {"sources": [{"secret": {"name": "projected"}},
                                                       {"configMap": {"name": "cm-projected"}}]}},
                {"name": "m", "configMap": {"name": "cm-vol"}}
            ]
        }));
        assert_eq!(
            secret_names(&s),
            [
                "pull",
                "init-from",
                "env",
                "debug",
                "vol",
                "azure",
                "rbd",
                "iscsi",
                "scaleio",
                "csi",
                "projected"
            ]
        );
        assert_eq!(
            config_map_names(&s),
            ["cm-from", "cm-env", "cm-projected", "cm-vol"]
        );
    }

    #[test]
    fn a_plain_pod_names_nothing() {
        let s = spec(json!({"containers": [{"name": "c", "image": "busybox"}]}));
        assert!(secret_names(&s).is_empty());
        assert!(config_map_names(&s).is_empty());
    }
}
