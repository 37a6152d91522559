//! ReplicaSets: the pod count a Deployment (or a user) asks for, and the scale subresource.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ReplicaSet;
use serde_json::Value;

use super::{scale_view, validate_workload};
use crate::kinds::pod::default_template;
use crate::spec_and_status;
use crate::strategy::{Kind, ScaleView};
use crate::table::{
    AGE, CONTAINERS, Column, IMAGES, NAME, Row, age, format_label_selector, integer,
    layout_containers, name, num, string, template_containers, text,
};
use crate::validation::{Errors, FieldError, Path, immutable};

impl Kind for ReplicaSet {
    const COLUMNS: &'static [Column] = REPLICA_SET_COLUMNS;
    const FIELDS: &'static [&'static str] = &["status.replicas"];

    spec_and_status!(generation);

    fn default_fields(&mut self) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        spec.replicas.get_or_insert(1);
        if let Some(t) = spec.template.as_mut() {
            default_template(t);
        }
    }

    fn prepare_create(&mut self) {
        self.status = None;
    }

    fn validate(&self, errs: &mut Errors) {
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&Path::new("spec"), ""));
            return;
        };
        let template = spec.template.clone().unwrap_or_default();
        validate_workload(
            "deployment",
            Some(&spec.selector),
            &template,
            spec.replicas,
            spec.template.is_some(),
            errs,
        );
    }

    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if let (Some(n), Some(o)) = (&self.spec, &old.spec) {
            immutable(
                &n.selector,
                &o.selector,
                &Path::new("spec").child("selector"),
                errs,
            );
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        match name {
            "status.replicas" => Some(
                self.status
                    .as_ref()
                    .map(|s| s.replicas)
                    .unwrap_or(0)
                    .to_string(),
            ),
            _ => None,
        }
    }

    fn scale(&self) -> Option<ScaleView> {
        let spec = self.spec.as_ref()?;
        Some(scale_view(
            spec.replicas,
            self.status.as_ref().map(|s| s.replicas),
            &spec.selector,
        ))
    }

    fn set_replicas(&mut self, replicas: i32) {
        if let Some(spec) = self.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(replica_set_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const REPLICA_SET_COLUMNS: &[Column] = &[
    NAME,
    integer("Desired", doc::REPLICA_SET_SPEC_REPLICAS),
    integer("Current", doc::REPLICA_SET_STATUS_REPLICAS),
    integer("Ready", doc::REPLICA_SET_READY_REPLICAS),
    AGE,
    CONTAINERS,
    IMAGES,
    string("Selector", doc::REPLICA_SET_SELECTOR).wide(),
];

fn replica_set_cells(rs: &ReplicaSet, now: Timestamp) -> Vec<Value> {
    let spec = rs.spec.clone().unwrap_or_default();
    let status = rs.status.clone().unwrap_or_default();
    let (containers, images) =
        layout_containers(spec.template.as_ref().map_or(&[], template_containers));
    vec![
        name(&rs.metadata),
        num(spec.replicas.unwrap_or(1)),
        num(status.replicas),
        num(status.ready_replicas.unwrap_or(0)),
        age(&rs.metadata, now),
        containers,
        images,
        text(format_label_selector(Some(&spec.selector))),
    ]
}

mod doc {
    pub const REPLICA_SET_SPEC_REPLICAS: &str = "Replicas is the number of desired replicas. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller/#what-is-a-replicationcontroller";
    pub const REPLICA_SET_SELECTOR: &str = "Selector is a label query over pods that should match the replica count. If the selector is empty, it is defaulted to the labels present on the pod template. Label keys and values that must match in order to be controlled by this replica set. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";
    pub const REPLICA_SET_STATUS_REPLICAS: &str = "Replicas is the most recently observed number of replicas. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller/#what-is-a-replicationcontroller";
    pub const REPLICA_SET_READY_REPLICAS: &str =
        "The number of ready replicas for this replica set.";
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::testing::*;

    #[test]
    fn replica_set_row() {
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-abc"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": {"replicas": 3, "readyReplicas": 1}});
        assert_eq!(
            row_of::<ReplicaSet>(rs),
            vec![
                json!("web-abc"),
                json!(3),
                json!(3),
                json!(1),
                json!("<unknown>"),
                json!("c"),
                json!("i"),
                json!("app=web")
            ]
        );
    }
}
