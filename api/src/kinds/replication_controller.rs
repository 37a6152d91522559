//! ReplicationControllers: the core/v1 predecessor of ReplicaSets, kept because old manifests
//! and `kubectl scale rc` still use them. Their selector is a plain label map that defaults
//! from the template, and their scale subresource prints it as a set-based selector.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    PodTemplateSpec, ReplicationController, ReplicationControllerSpec, ReplicationControllerStatus,
};
use serde_json::Value;

use crate::kinds::pod::default_template;
use crate::kinds::pod::validation::validate_template;
use crate::spec_and_status;
use crate::strategy::{GcPolicy, Kind, ScaleView};
use crate::table::{
    AGE, CONTAINERS, Column, IMAGES, NAME, Row, age, format_labels, integer, layout_containers,
    name, num, string, template_containers, text,
};
use crate::validation::{ErrorKind, Errors, FieldError, Path};

impl Kind for ReplicationController {
    const COLUMNS: &'static [Column] = REPLICATION_CONTROLLER_COLUMNS;
    const FIELDS: &'static [&'static str] = &["status.replicas"];
    /// Upstream orphans the pods of a v1 ReplicationController by default, for compatibility.
    const GC_POLICY: GcPolicy = GcPolicy::OrphanDependents;

    spec_and_status!(generation);

    /// SetDefaults_ReplicationController: the selector and the controller's own labels default
    /// to the template's labels, replicas to 1.
    fn default_fields(&mut self) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        let template_labels = spec
            .template
            .as_ref()
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .filter(|l| !l.is_empty());
        if let Some(labels) = template_labels {
            if spec.selector.as_ref().is_none_or(BTreeMap::is_empty) {
                spec.selector = Some(labels.clone());
            }
            if self.metadata.labels.as_ref().is_none_or(BTreeMap::is_empty) {
                self.metadata.labels = Some(labels);
            }
        }
        spec.replicas.get_or_insert(1);
        if let Some(t) = spec.template.as_mut() {
            default_template(t);
        }
    }

    fn prepare_create(&mut self) {
        self.status = Some(ReplicationControllerStatus::default());
    }

    fn validate(&self, errs: &mut Errors) {
        let spec = self.spec.clone().unwrap_or_default();
        validate_spec(&spec, &Path::new("spec"), errs);
    }

    fn validate_update(&self, _old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if let Some(status) = &self.status {
            validate_status(status, &Path::new("status"), errs);
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        match name {
            "status.replicas" => Some(self.status.as_ref().map_or(0, |s| s.replicas).to_string()),
            _ => None,
        }
    }

    fn scale(&self) -> Option<ScaleView> {
        let spec = self.spec.as_ref()?;
        Some(ScaleView {
            spec_replicas: spec.replicas.unwrap_or(1),
            status_replicas: self.status.as_ref().map_or(0, |s| s.replicas),
            selector: Some(selector_string(spec.selector.as_ref())).filter(|s| !s.is_empty()),
        })
    }

    fn set_replicas(&mut self, replicas: i32) {
        if let Some(spec) = self.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(replication_controller_cells(self, now))
    }
}

/// `labels.SelectorFromSet(selector).String()`: `k=v` pairs sorted by key, empty for none.
fn selector_string(selector: Option<&BTreeMap<String, String>>) -> String {
    selector
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Go's `%#v` of a label map, as upstream prints the template labels a selector misses.
fn go_map(labels: Option<&BTreeMap<String, String>>) -> String {
    let pairs: Vec<String> = labels
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k:?}:{v:?}"))
        .collect();
    format!("map[string]string{{{}}}", pairs.join(", "))
}

fn non_negative(value: i64, path: &Path, errs: &mut Errors) {
    if value < 0 {
        errs.push(FieldError::invalid(
            path,
            value,
            "must be greater than or equal to 0",
        ));
    }
}

/// ValidateReplicationControllerSpec.
fn validate_spec(spec: &ReplicationControllerSpec, path: &Path, errs: &mut Errors) {
    non_negative(
        spec.min_ready_seconds.unwrap_or(0).into(),
        &path.child("minReadySeconds"),
        errs,
    );
    let selector = spec.selector.clone().unwrap_or_default();
    if selector.is_empty() {
        errs.push(FieldError::required(&path.child("selector"), ""));
    }
    non_negative(
        spec.replicas.unwrap_or(0).into(),
        &path.child("replicas"),
        errs,
    );
    let tpath = path.child("template");
    let Some(template) = &spec.template else {
        errs.push(FieldError::required(&tpath, ""));
        return;
    };
    let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
    let matches = selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
    if !selector.is_empty() && !matches {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            &tpath.child("metadata").child("labels"),
            Some(go_map(labels)),
            "`selector` does not match template `labels`",
        ));
    }
    // The template's pod spec is a struct upstream, never missing: an absent one is empty.
    let full = PodTemplateSpec {
        metadata: template.metadata.clone(),
        spec: Some(template.spec.clone().unwrap_or_default()),
    };
    validate_template(&full, &tpath, errs);
    if let Some(ps) = &template.spec {
        if let Some(rp) = ps.restart_policy.as_deref()
            && rp != "Always"
        {
            errs.push(FieldError::not_supported(
                &tpath.child("spec").child("restartPolicy"),
                rp,
                &["Always"],
            ));
        }
        if ps.active_deadline_seconds.is_some() {
            errs.push(FieldError::forbidden(
                &tpath.child("spec").child("activeDeadlineSeconds"),
                "activeDeadlineSeconds in ReplicationController is not Supported",
            ));
        }
    }
}

/// ValidateReplicationControllerStatus, for what the controller writes.
fn validate_status(status: &ReplicationControllerStatus, path: &Path, errs: &mut Errors) {
    let replicas = status.replicas;
    let fully_labeled = status.fully_labeled_replicas.unwrap_or(0);
    let ready = status.ready_replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    non_negative(replicas.into(), &path.child("replicas"), errs);
    non_negative(
        fully_labeled.into(),
        &path.child("fullyLabeledReplicas"),
        errs,
    );
    non_negative(ready.into(), &path.child("readyReplicas"), errs);
    non_negative(available.into(), &path.child("availableReplicas"), errs);
    non_negative(
        status.observed_generation.unwrap_or(0),
        &path.child("observedGeneration"),
        errs,
    );
    let msg = "cannot be greater than status.replicas";
    for (field, value) in [
        ("fullyLabeledReplicas", fully_labeled),
        ("readyReplicas", ready),
        ("availableReplicas", available),
    ] {
        if value > replicas {
            errs.push(FieldError::invalid(&path.child(field), value, msg));
        }
    }
    if available > ready {
        errs.push(FieldError::invalid(
            &path.child("availableReplicas"),
            available,
            "cannot be greater than readyReplicas",
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const REPLICATION_CONTROLLER_COLUMNS: &[Column] = &[
    NAME,
    integer("Desired", doc::SPEC_REPLICAS),
    integer("Current", doc::STATUS_REPLICAS),
    integer("Ready", doc::READY_REPLICAS),
    AGE,
    CONTAINERS,
    IMAGES,
    string("Selector", doc::SELECTOR).wide(),
];

fn replication_controller_cells(rc: &ReplicationController, now: Timestamp) -> Vec<Value> {
    let spec = rc.spec.clone().unwrap_or_default();
    let status = rc.status.clone().unwrap_or_default();
    let (containers, images) =
        layout_containers(spec.template.as_ref().map_or(&[], template_containers));
    vec![
        name(&rc.metadata),
        num(spec.replicas.unwrap_or(1)),
        num(status.replicas),
        num(status.ready_replicas.unwrap_or(0)),
        age(&rc.metadata, now),
        containers,
        images,
        text(format_labels(spec.selector.as_ref())),
    ]
}

mod doc {
    pub const SPEC_REPLICAS: &str = "Replicas is the number of desired replicas. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller";
    pub const STATUS_REPLICAS: &str = "Replicas is the most recently observed number of replicas. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller";
    pub const READY_REPLICAS: &str =
        "The number of ready replicas for this replication controller.";
    pub const SELECTOR: &str = "Selector is a label query over pods that should match the Replicas count. If Selector is empty, it is defaulted to the labels present on the Pod template. Label keys and values that must match in order to be controlled by this replication controller, if empty defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    fn rc(spec: Value) -> ReplicationController {
        let mut rc: ReplicationController = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": spec
        }))
        .unwrap();
        rc.default_fields();
        rc
    }

    fn errors(rc: &ReplicationController) -> Vec<String> {
        let mut errs = Vec::new();
        rc.validate(&mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    fn template(labels: Value) -> Value {
        json!({"metadata": {"labels": labels},
               "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}})
    }

    #[test]
    fn defaults_from_the_template() {
        let c = rc(json!({"template": template(json!({"app": "web"}))}));
        let spec = c.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(1));
        assert_eq!(spec.selector, Some([("app".into(), "web".into())].into()));
        assert_eq!(c.metadata.labels, spec.selector);
        assert_eq!(
            spec.template
                .as_ref()
                .unwrap()
                .spec
                .as_ref()
                .unwrap()
                .restart_policy
                .as_deref(),
            Some("Always")
        );
        assert_eq!(errors(&c), Vec::<String>::new());
        let scale = c.scale().unwrap();
        assert_eq!(
            (scale.spec_replicas, scale.selector.as_deref()),
            (1, Some("app=web"))
        );
    }

    #[test]
    fn validation() {
        assert_eq!(
            errors(&rc(
                json!({"replicas": -1, "template": template(json!({}))})
            )),
            vec![
                "spec.selector: Required value",
                "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
            ]
        );
        assert_eq!(
            errors(&rc(json!({"selector": {"app": "web"}}))),
            vec!["spec.template: Required value"]
        );
        let mut t = template(json!({"app": "db"}));
        t["spec"]["restartPolicy"] = json!("OnFailure");
        t["spec"]["activeDeadlineSeconds"] = json!(30);
        assert_eq!(
            errors(&rc(json!({"selector": {"app": "web"}, "template": t}))),
            vec![
                "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"db\"}: `selector` does not match template `labels`",
                "spec.template.spec.restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Always\"",
                "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicationController is not Supported",
            ]
        );
        assert_eq!(
            errors(&rc(
                json!({"template": {"metadata": {"labels": {"app": "web"}}}})
            )),
            vec!["spec.template.spec.containers: Required value"]
        );
    }

    #[test]
    fn status_validation() {
        let old = rc(json!({"template": template(json!({"app": "web"}))}));
        let mut new = old.clone();
        new.status = Some(
            serde_json::from_value(
                json!({"replicas": 1, "readyReplicas": 2, "availableReplicas": 3}),
            )
            .unwrap(),
        );
        let mut errs = Vec::new();
        new.validate_update(&old, &mut errs);
        assert_eq!(
            errs.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec![
                "status.readyReplicas: Invalid value: 2: cannot be greater than status.replicas",
                "status.availableReplicas: Invalid value: 3: cannot be greater than status.replicas",
                "status.availableReplicas: Invalid value: 3: cannot be greater than readyReplicas",
            ]
        );
    }

    #[test]
    fn replication_controller_row() {
        let c = json!({"apiVersion": "v1", "kind": "ReplicationController",
            "metadata": {"name": "web", "creationTimestamp": ago(90)},
            "spec": {"replicas": 3, "selector": {"app": "web", "tier": "fe"},
                     "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"},
                                                          {"name": "log", "image": "busybox"}]}}},
            "status": {"replicas": 3, "readyReplicas": 2}});
        assert_eq!(
            row_of::<ReplicationController>(c),
            vec![
                json!("web"),
                json!(3),
                json!(3),
                json!(2),
                json!("90s"),
                json!("nginx,log"),
                json!("nginx:1.27,busybox"),
                json!("app=web,tier=fe")
            ]
        );
        let bare = json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "x"},
            "spec": {"replicas": 0}});
        assert_eq!(
            row_of::<ReplicationController>(bare)[1..],
            [
                json!(0),
                json!(0),
                json!(0),
                json!("<unknown>"),
                json!(""),
                json!(""),
                json!("<none>")
            ]
        );
    }
}
