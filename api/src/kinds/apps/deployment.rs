//! Deployments: rolling-update and recreate strategies, the revision annotation the controller
//! writes through status, and the scale subresource.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use super::{is_zero, scale_view, validate_int_or_percent, validate_workload};
use crate::kinds::pod::default_template;
use crate::spec_and_status;
use crate::strategy::{Kind, ScaleView};
use crate::table::{
    AGE, CONTAINERS, Column, IMAGES, NAME, Row, age, label_selector_string, layout_containers,
    name, num, string, template_containers, text,
};
use crate::validation::{Errors, FieldError, Path, immutable};

impl Kind for Deployment {
    const COLUMNS: &'static [Column] = DEPLOYMENT_COLUMNS;
    const STATUS_WRITES_ANNOTATIONS: bool = true;

    spec_and_status!();

    fn spec_changed(&self, old: &Self) -> Option<bool> {
        Some(self.spec != old.spec || self.metadata.annotations != old.metadata.annotations)
    }

    fn default_fields(&mut self) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        spec.replicas.get_or_insert(1);
        let strategy = spec
            .strategy
            .get_or_insert_with(DeploymentStrategy::default);
        let ty = strategy
            .type_
            .get_or_insert_with(|| "RollingUpdate".into())
            .clone();
        if ty == "RollingUpdate" {
            let ru = strategy
                .rolling_update
                .get_or_insert_with(RollingUpdateDeployment::default);
            ru.max_unavailable
                .get_or_insert_with(|| IntOrString::String("25%".into()));
            ru.max_surge
                .get_or_insert_with(|| IntOrString::String("25%".into()));
        }
        spec.revision_history_limit.get_or_insert(10);
        spec.progress_deadline_seconds.get_or_insert(600);
        default_template(&mut spec.template);
    }

    fn prepare_create(&mut self) {
        self.status = None;
    }

    fn validate(&self, errs: &mut Errors) {
        let Some(spec) = &self.spec else {
            errs.push(FieldError::required(&Path::new("spec"), ""));
            return;
        };
        validate_workload(
            "deployment",
            Some(&spec.selector),
            &spec.template,
            spec.replicas,
            true,
            errs,
        );
        let sp = Path::new("spec").child("strategy");
        if let Some(strategy) = &spec.strategy {
            match strategy.type_.as_deref() {
                Some("Recreate") if strategy.rolling_update.is_some() => {
                    errs.push(FieldError::forbidden(
                        &sp.child("rollingUpdate"),
                        "may not be specified when strategy `type` is 'Recreate'",
                    ))
                }
                Some("Recreate") | Some("RollingUpdate") | None => {}
                Some(t) => errs.push(FieldError::not_supported(
                    &sp.child("type"),
                    t,
                    &["Recreate", "RollingUpdate"],
                )),
            }
            if let Some(ru) = &strategy.rolling_update {
                if let Some(v) = &ru.max_unavailable {
                    validate_int_or_percent(
                        v,
                        &sp.child("rollingUpdate").child("maxUnavailable"),
                        errs,
                    );
                }
                if let Some(v) = &ru.max_surge {
                    validate_int_or_percent(v, &sp.child("rollingUpdate").child("maxSurge"), errs);
                }
                if is_zero(ru.max_unavailable.as_ref()) && is_zero(ru.max_surge.as_ref()) {
                    errs.push(FieldError::invalid(
                        &sp.child("rollingUpdate").child("maxUnavailable"),
                        0,
                        "may not be 0 when `maxSurge` is 0",
                    ));
                }
            }
        }
        if let (Some(p), m) = (
            spec.progress_deadline_seconds,
            spec.min_ready_seconds.unwrap_or(0),
        ) && p <= m
        {
            errs.push(FieldError::invalid(
                &Path::new("spec").child("progressDeadlineSeconds"),
                p,
                "must be greater than minReadySeconds",
            ));
        }
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

    fn scale(&self) -> Option<ScaleView> {
        let spec = self.spec.as_ref()?;
        Some(scale_view(
            spec.replicas,
            self.status.as_ref().and_then(|s| s.replicas),
            &spec.selector,
        ))
    }

    fn set_replicas(&mut self, replicas: i32) {
        if let Some(spec) = self.spec.as_mut() {
            spec.replicas = Some(replicas);
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(deployment_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const DEPLOYMENT_COLUMNS: &[Column] = &[
    NAME,
    string("Ready", "Number of the pod with ready state"),
    string("Up-to-date", doc::DEPLOYMENT_UPDATED_REPLICAS),
    string("Available", doc::DEPLOYMENT_AVAILABLE_REPLICAS),
    AGE,
    CONTAINERS,
    IMAGES,
    string("Selector", doc::DEPLOYMENT_SELECTOR).wide(),
];

fn deployment_cells(d: &Deployment, now: Timestamp) -> Vec<Value> {
    let spec = d.spec.clone().unwrap_or_default();
    let status = d.status.clone().unwrap_or_default();
    let desired = spec.replicas.unwrap_or(1);
    let ready = status.ready_replicas.unwrap_or(0);
    let selector =
        label_selector_string(Some(&spec.selector)).unwrap_or_else(|| "<invalid>".to_string());
    let (containers, images) = layout_containers(template_containers(&spec.template));
    vec![
        name(&d.metadata),
        text(format!("{ready}/{desired}")),
        num(status.updated_replicas.unwrap_or(0)),
        num(status.available_replicas.unwrap_or(0)),
        age(&d.metadata, now),
        containers,
        images,
        text(selector),
    ]
}

mod doc {
    pub const DEPLOYMENT_UPDATED_REPLICAS: &str = "Total number of non-terminated pods targeted by this deployment that have the desired template spec.";
    pub const DEPLOYMENT_AVAILABLE_REPLICAS: &str = "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.";
    pub const DEPLOYMENT_SELECTOR: &str = "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.";
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::testing::*;

    #[test]
    fn deployment_rows() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "creationTimestamp": ago(600)},
            "spec": {"replicas": 3,
                     "selector": {"matchLabels": {"app": "web"},
                                  "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]},
                                                       {"key": "canary", "operator": "DoesNotExist"}]},
                     "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"},
                                                          {"name": "log", "image": "busybox"}]}}},
            "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}});
        assert_eq!(
            row_of::<Deployment>(d),
            vec![
                json!("web"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("10m"),
                json!("nginx,log"),
                json!("nginx:1.27,busybox"),
                json!("app=web,!canary,tier in (a,b)")
            ]
        );
        // A fresh deployment: no status yet.
        let fresh = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "template": {}}});
        assert_eq!(
            narrow::<Deployment>(fresh),
            vec![
                json!("x"),
                json!("0/1"),
                json!(0),
                json!(0),
                json!("<unknown>")
            ]
        );
        // An invalid selector.
        let bad = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
            "spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}, "template": {}}});
        assert_eq!(row_of::<Deployment>(bad)[7], "<invalid>");
    }
}
