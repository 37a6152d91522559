//! Pods: upstream's defaults (SetDefaults_Pod, _Container, probes, volumes) and the registry
//! strategy (status starts Pending with a QoS class); their validation and printing, each
//! large, have modules of their own.

pub mod ephemeral;
pub mod references;
pub mod resources;
mod table;
pub mod validation;

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Container, Pod, PodSpec, PodStatus, PodTemplateSpec, Probe, Toleration, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::strategy::Kind;
use crate::table::{Column, Row};
use crate::validation::{Errors, FieldError, Path};
use validation::validate_pod_spec;

fn validate_pod(pod: &Pod, errs: &mut Errors) {
    match &pod.spec {
        None => errs.push(FieldError::required(&Path::new("spec"), "")),
        Some(spec) => validate_pod_spec(spec, &Path::new("spec"), errs),
    }
}

impl Kind for Pod {
    const COLUMNS: &'static [Column] = table::POD_COLUMNS;
    const FIELDS: &'static [&'static str] = &[
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.podIPs",
        "status.nominatedNodeName",
    ];
    const RETURN_DELETED: bool = true;

    fn default_fields(&mut self) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        default_pod_spec(spec);
        // SetDefaults_Pod: only for pods, not for templates.
        spec.enable_service_links.get_or_insert(true);
        let host_network = spec.host_network.unwrap_or(false);
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            if let Some(r) = c.resources.as_mut()
                && let Some(limits) = r.limits.clone()
            {
                let requests = r.requests.get_or_insert_with(BTreeMap::new);
                for (k, v) in limits {
                    requests.entry(k).or_insert(v);
                }
            }
            for p in c.ports.iter_mut().flatten() {
                if host_network && p.host_port.unwrap_or(0) == 0 {
                    p.host_port = Some(p.container_port);
                }
            }
        }
    }

    fn prepare_create(&mut self) {
        let qos = self.spec.as_ref().map(qos_class).unwrap_or("BestEffort");
        let gated = self
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| !g.is_empty());
        self.status = Some(PodStatus {
            phase: Some("Pending".into()),
            qos_class: Some(qos.into()),
            conditions: gated.then(|| {
                vec![k8s_openapi::api::core::v1::PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some("SchedulingGated".into()),
                    message: Some("Scheduling is blocked due to non-empty scheduling gates".into()),
                    last_transition_time: Some(crate::meta::now()),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        });
    }

    fn admit(&mut self) {
        if let Some(spec) = self.spec.as_mut() {
            default_toleration_seconds(spec);
        }
    }

    /// What Priority admission set on create is kept when an update leaves it out (upstream's
    /// plugin does this on Update), so that `kubectl replace` of a manifest still works.
    fn prepare_update(&mut self, old: &Self) {
        if let (Some(spec), Some(old)) = (self.spec.as_mut(), old.spec.as_ref()) {
            if spec.priority.is_none() {
                spec.priority = old.priority;
            }
            if spec.preemption_policy.is_none() {
                spec.preemption_policy = old.preemption_policy.clone();
            }
        }
    }

    fn validate(&self, errs: &mut Errors) {
        validate_pod(self, errs);
        if let Some(spec) = &self.spec {
            ephemeral::validate_create(spec, errs);
        }
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        validate_pod(self, errs);
        if let (Some(new), Some(old)) = (&self.spec, &old.spec) {
            // Only images, activeDeadlineSeconds and added tolerations may change.
            let mut comparable = new.clone();
            for (c, o) in comparable.containers.iter_mut().zip(&old.containers) {
                c.image = o.image.clone();
            }
            for (c, o) in comparable
                .init_containers
                .iter_mut()
                .flatten()
                .zip(old.init_containers.iter().flatten())
            {
                c.image = o.image.clone();
            }
            comparable.active_deadline_seconds = old.active_deadline_seconds;
            comparable.tolerations = old.tolerations.clone();
            comparable.scheduling_gates = old.scheduling_gates.clone();
            if comparable != *old {
                errs.push(FieldError::forbidden(
                    &Path::new("spec"),
                    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
                ));
            }
        }
    }

    fn keep_status(&mut self, old: &Self) {
        self.status = old.status.clone();
    }

    fn keep_all_but_ephemeral_containers(&mut self, old: &Self) {
        ephemeral::keep_all_but_ephemeral_containers(self, old);
    }

    fn validate_ephemeral_containers_update(&self, old: &Self, errs: &mut Errors) {
        ephemeral::validate_update(self, old, errs);
    }

    fn keep_spec(&mut self, old: &Self) {
        self.spec = old.spec.clone();
    }

    fn field(&self, name: &str) -> Option<String> {
        let spec = self.spec.as_ref();
        let status = self.status.as_ref();
        match name {
            "spec.nodeName" => spec.and_then(|s| s.node_name.clone()),
            "spec.restartPolicy" => spec.and_then(|s| s.restart_policy.clone()),
            "spec.schedulerName" => spec.and_then(|s| s.scheduler_name.clone()),
            "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
            "spec.hostNetwork" => Some(
                spec.and_then(|s| s.host_network)
                    .unwrap_or(false)
                    .to_string(),
            ),
            "status.phase" => status.and_then(|s| s.phase.clone()),
            "status.podIP" => status.and_then(|s| s.pod_ip.clone()),
            "status.podIPs" => status
                .and_then(|s| s.pod_ips.as_ref())
                .and_then(|ips| ips.first())
                .map(|ip| ip.ip.clone()),
            "status.nominatedNodeName" => status.and_then(|s| s.nominated_node_name.clone()),
            _ => None,
        }
    }

    fn default_grace_period(&self) -> Option<i64> {
        // A pod that never reached a node has nothing to stop: it goes at once.
        let spec = self.spec.as_ref()?;
        spec.node_name.as_ref()?;
        if self
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed")
        {
            return None;
        }
        Some(spec.termination_grace_period_seconds.unwrap_or(30))
    }

    fn row(&self, now: Timestamp) -> Row {
        table::pod_row(self, now)
    }
}

/// What the DefaultTolerationSeconds admission plugin gives pods that do not tolerate the
/// node lifecycle controller's NoExecute taints themselves (upstream's
/// `--default-not-ready-toleration-seconds` and `--default-unreachable-toleration-seconds`).
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;
pub const TAINT_NODE_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_NODE_UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// Upstream's DefaultTolerationSeconds admission: a pod that does not already tolerate
/// `not-ready:NoExecute` or `unreachable:NoExecute` (a toleration with that key or no key, and
/// that effect or none) gets one for `DEFAULT_TOLERATION_SECONDS`, so a node that stops
/// reporting evicts its pods after five minutes rather than at once. Like upstream it looks only
/// at key and effect: an `Equal` toleration with some value counts as tolerating.
pub fn default_toleration_seconds(spec: &mut PodSpec) {
    let tolerates = |key: &str| {
        spec.tolerations.iter().flatten().any(|t| {
            t.key.as_deref().is_none_or(|k| k.is_empty() || k == key)
                && t.effect
                    .as_deref()
                    .is_none_or(|e| e.is_empty() || e == "NoExecute")
        })
    };
    let missing: Vec<&str> = [TAINT_NODE_NOT_READY, TAINT_NODE_UNREACHABLE]
        .into_iter()
        .filter(|key| !tolerates(key))
        .collect();
    for key in missing {
        spec.tolerations
            .get_or_insert_with(Vec::new)
            .push(Toleration {
                key: Some(key.into()),
                operator: Some("Exists".into()),
                effect: Some("NoExecute".into()),
                toleration_seconds: Some(DEFAULT_TOLERATION_SECONDS),
                value: None,
            });
    }
}

/// SetDefaults for a pod spec (also inside templates).
pub fn default_pod_spec(spec: &mut PodSpec) {
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.security_context.get_or_insert_with(Default::default);
    spec.scheduler_name
        .get_or_insert_with(|| "default-scheduler".into());
    if spec.service_account_name.is_none() && spec.service_account.is_some() {
        spec.service_account_name = spec.service_account.clone();
    }
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        default_container(c);
    }
    for v in spec.volumes.iter_mut().flatten() {
        default_volume(v);
    }
}

fn default_container(c: &mut Container) {
    c.termination_message_path
        .get_or_insert_with(|| "/dev/termination-log".into());
    c.termination_message_policy
        .get_or_insert_with(|| "File".into());
    if c.image_pull_policy.is_none() {
        c.image_pull_policy = Some(default_pull_policy(c.image.as_deref().unwrap_or("")).into());
    }
    for p in c.ports.iter_mut().flatten() {
        p.protocol.get_or_insert_with(|| "TCP".into());
    }
    for probe in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        default_probe(probe);
    }
    if let Some(lc) = c.lifecycle.as_mut() {
        for handler in [&mut lc.post_start, &mut lc.pre_stop].into_iter().flatten() {
            if let Some(get) = handler.http_get.as_mut() {
                get.path.get_or_insert_with(|| "/".into());
                get.scheme.get_or_insert_with(|| "HTTP".into());
            }
        }
    }
    for e in c.env.iter_mut().flatten() {
        if let Some(f) = e.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            f.api_version.get_or_insert_with(|| "v1".into());
        }
    }
}

fn default_probe(p: &mut Probe) {
    p.timeout_seconds.get_or_insert(1);
    p.period_seconds.get_or_insert(10);
    p.success_threshold.get_or_insert(1);
    p.failure_threshold.get_or_insert(3);
    if let Some(get) = p.http_get.as_mut() {
        get.path.get_or_insert_with(|| "/".into());
        get.scheme.get_or_insert_with(|| "HTTP".into());
    }
}

fn default_volume(v: &mut Volume) {
    let has_source = v.empty_dir.is_some()
        || v.host_path.is_some()
        || v.config_map.is_some()
        || v.secret.is_some()
        || v.downward_api.is_some()
        || v.projected.is_some()
        || v.persistent_volume_claim.is_some()
        || v.nfs.is_some()
        || v.csi.is_some()
        || v.ephemeral.is_some()
        || v.image.is_some()
        || v.iscsi.is_some()
        || v.local_volume_source_present();
    if !has_source {
        v.empty_dir = Some(Default::default());
    }
    if let Some(s) = v.secret.as_mut() {
        s.default_mode.get_or_insert(0o644);
    }
    if let Some(s) = v.config_map.as_mut() {
        s.default_mode.get_or_insert(0o644);
    }
    if let Some(s) = v.downward_api.as_mut() {
        s.default_mode.get_or_insert(0o644);
        for item in s.items.iter_mut().flatten() {
            if let Some(f) = item.field_ref.as_mut() {
                f.api_version.get_or_insert_with(|| "v1".into());
            }
        }
    }
    if let Some(s) = v.projected.as_mut() {
        s.default_mode.get_or_insert(0o644);
        for src in s.sources.iter_mut().flatten() {
            if let Some(t) = src.service_account_token.as_mut() {
                t.expiration_seconds.get_or_insert(3600);
            }
        }
    }
    if let Some(h) = v.host_path.as_mut() {
        h.type_.get_or_insert_with(String::new);
    }
}

/// Volume sources the defaulting above does not list one by one.
trait OtherSources {
    fn local_volume_source_present(&self) -> bool;
}

impl OtherSources for Volume {
    fn local_volume_source_present(&self) -> bool {
        self.aws_elastic_block_store.is_some()
            || self.azure_disk.is_some()
            || self.azure_file.is_some()
            || self.cephfs.is_some()
            || self.cinder.is_some()
            || self.fc.is_some()
            || self.flex_volume.is_some()
            || self.flocker.is_some()
            || self.gce_persistent_disk.is_some()
            || self.git_repo.is_some()
            || self.glusterfs.is_some()
            || self.photon_persistent_disk.is_some()
            || self.portworx_volume.is_some()
            || self.quobyte.is_some()
            || self.rbd.is_some()
            || self.scale_io.is_some()
            || self.storageos.is_some()
            || self.vsphere_volume.is_some()
    }
}

/// `Always` for `:latest` or untagged images, else `IfNotPresent`.
pub fn default_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

/// Upstream's QoS classes: Guaranteed when every container's requests equal its cpu and
/// memory limits, BestEffort when nothing asks for anything, Burstable otherwise.
pub fn qos_class(spec: &PodSpec) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let r = c.resources.as_ref();
        let requests = r.and_then(|r| r.requests.as_ref());
        let limits = r.and_then(|r| r.limits.as_ref());
        for res in ["cpu", "memory"] {
            let req = requests.and_then(|m| m.get(res)).filter(|q| !is_zero(q));
            let lim = limits.and_then(|m| m.get(res)).filter(|q| !is_zero(q));
            if req.is_some() || lim.is_some() {
                any = true;
            }
            match (req, lim) {
                (Some(a), Some(b)) if a == b => {}
                _ => guaranteed = false,
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn is_zero(q: &Quantity) -> bool {
    q.0.trim_start_matches('0').is_empty() || q.0 == "0m"
}

pub fn default_template(t: &mut PodTemplateSpec) {
    if let Some(spec) = t.spec.as_mut() {
        default_pod_spec(spec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn default_toleration_seconds_as_upstream() {
        let admitted = |tolerations: serde_json::Value| {
            let mut p = pod(serde_json::json!({
                "spec": {"containers": [], "tolerations": tolerations},
            }));
            p.admit();
            serde_json::to_value(p.spec.unwrap().tolerations).unwrap()
        };
        let not_ready = serde_json::json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300});
        let unreachable = serde_json::json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300});
        assert_eq!(
            admitted(serde_json::json!([])),
            serde_json::json!([not_ready, unreachable])
        );
        // A NoSchedule toleration of the same key does not count.
        let no_schedule = serde_json::json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"});
        assert_eq!(
            admitted(serde_json::json!([no_schedule])),
            serde_json::json!([no_schedule, not_ready, unreachable])
        );
        // Only the key and effect are looked at: its own seconds (or none) are kept.
        let mine = serde_json::json!({"key": "node.kubernetes.io/unreachable", "operator": "Equal", "value": "x", "effect": "NoExecute", "tolerationSeconds": 5});
        assert_eq!(
            admitted(serde_json::json!([mine])),
            serde_json::json!([mine, not_ready])
        );
        // A toleration of every key and effect tolerates both.
        let everything = serde_json::json!({"operator": "Exists"});
        assert_eq!(
            admitted(serde_json::json!([everything])),
            serde_json::json!([everything])
        );
    }

    #[test]
    fn defaults_as_upstream() {
        let mut p = pod(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [
                {"name": "a", "image": "busybox", "ports": [{"containerPort": 80}],
                 "readinessProbe": {"httpGet": {"port": 80}},
                 "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "b", "image": "busybox:1.36"}
            ], "volumes": [{"name": "v"}]}
        }));
        p.default_fields();
        p.prepare_create();
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert_eq!(
            spec.containers[0].image_pull_policy.as_deref(),
            Some("Always")
        );
        assert_eq!(
            spec.containers[1].image_pull_policy.as_deref(),
            Some("IfNotPresent")
        );
        assert_eq!(
            spec.containers[0].ports.as_ref().unwrap()[0]
                .protocol
                .as_deref(),
            Some("TCP")
        );
        let probe = spec.containers[0].readiness_probe.as_ref().unwrap();
        assert_eq!(
            (probe.period_seconds, probe.failure_threshold),
            (Some(10), Some(3))
        );
        assert_eq!(probe.http_get.as_ref().unwrap().path.as_deref(), Some("/"));
        assert_eq!(
            spec.containers[0]
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["cpu"]
                .0,
            "1"
        );
        assert!(spec.volumes.as_ref().unwrap()[0].empty_dir.is_some());
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        assert_eq!(status.qos_class.as_deref(), Some("Burstable"));
    }

    #[test]
    fn validation_names_fields() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "A"}, {"name": "b", "image": "x", "ports": [{"containerPort": 70000}]}],
                     "restartPolicy": "Sometimes"}
        }));
        let mut errs = Vec::new();
        p.validate(&mut errs);
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert!(fields.contains(&"spec.containers[0].name"), "{fields:?}");
        assert!(fields.contains(&"spec.containers[0].image"), "{fields:?}");
        assert!(
            fields.contains(&"spec.containers[1].ports[0].containerPort"),
            "{fields:?}"
        );
        assert!(fields.contains(&"spec.restartPolicy"), "{fields:?}");
    }

    #[test]
    fn pull_policy_rule() {
        assert_eq!(default_pull_policy("busybox"), "Always");
        assert_eq!(default_pull_policy("busybox:latest"), "Always");
        assert_eq!(default_pull_policy("localhost:5000/busybox"), "Always");
        assert_eq!(
            default_pull_policy("localhost:5000/busybox:1"),
            "IfNotPresent"
        );
        assert_eq!(default_pull_policy("busybox@sha256:abc"), "IfNotPresent");
    }
}
