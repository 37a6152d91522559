//! DaemonSets: one pod per eligible node, and their update strategy.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetUpdateStrategy, RollingUpdateDaemonSet};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use super::{is_zero, validate_workload};
use crate::kinds::pod::default_template;
use crate::spec_and_status;
use crate::strategy::Kind;
use crate::table::{
    AGE, CONTAINERS, Column, IMAGES, NAME, Row, age, format_label_selector, format_labels, integer,
    layout_containers, name, num, string, template_containers, text,
};
use crate::validation::{Errors, FieldError, Path, immutable};

impl Kind for DaemonSet {
    const COLUMNS: &'static [Column] = DAEMON_SET_COLUMNS;

    spec_and_status!(generation);

    fn default_fields(&mut self) {
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        let strategy = spec
            .update_strategy
            .get_or_insert_with(DaemonSetUpdateStrategy::default);
        let ty = strategy
            .type_
            .get_or_insert_with(|| "RollingUpdate".into())
            .clone();
        if ty == "RollingUpdate" {
            let ru = strategy
                .rolling_update
                .get_or_insert_with(RollingUpdateDaemonSet::default);
            ru.max_unavailable.get_or_insert(IntOrString::Int(1));
            ru.max_surge.get_or_insert(IntOrString::Int(0));
        }
        spec.revision_history_limit.get_or_insert(10);
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
            "daemonset",
            Some(&spec.selector),
            &spec.template,
            None,
            true,
            errs,
        );
        let sp = Path::new("spec").child("updateStrategy");
        if let Some(s) = &spec.update_strategy {
            match s.type_.as_deref() {
                Some("RollingUpdate") => {
                    if let Some(ru) = &s.rolling_update {
                        let unavailable_zero = is_zero(ru.max_unavailable.as_ref());
                        let surge_zero = is_zero(ru.max_surge.as_ref());
                        if unavailable_zero && surge_zero {
                            errs.push(FieldError::required(
                                &sp.child("rollingUpdate").child("maxUnavailable"),
                                "cannot be 0 when maxSurge is 0",
                            ));
                        } else if !unavailable_zero && !surge_zero {
                            errs.push(FieldError::invalid(
                                &sp.child("rollingUpdate").child("maxSurge"),
                                "",
                                "may not be set when maxUnavailable is non-zero",
                            ));
                        }
                    }
                }
                Some("OnDelete") | None => {}
                Some(t) => errs.push(FieldError::not_supported(
                    &sp.child("type"),
                    t,
                    &["OnDelete", "RollingUpdate"],
                )),
            }
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

    fn row(&self, now: Timestamp) -> Row {
        Row::new(daemon_set_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const DAEMON_SET_COLUMNS: &[Column] = &[
    NAME,
    integer("Desired", doc::DAEMON_SET_DESIRED),
    integer("Current", doc::DAEMON_SET_CURRENT),
    integer("Ready", doc::DAEMON_SET_READY),
    integer("Up-to-date", doc::DAEMON_SET_UPDATED),
    integer("Available", doc::DAEMON_SET_AVAILABLE),
    string("Node Selector", doc::POD_NODE_SELECTOR),
    AGE,
    CONTAINERS,
    IMAGES,
    string("Selector", doc::DAEMON_SET_SELECTOR).wide(),
];

fn daemon_set_cells(ds: &DaemonSet, now: Timestamp) -> Vec<Value> {
    let spec = ds.spec.clone().unwrap_or_default();
    let status = ds.status.clone().unwrap_or_default();
    let node_selector = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref());
    let (containers, images) = layout_containers(template_containers(&spec.template));
    vec![
        name(&ds.metadata),
        num(status.desired_number_scheduled),
        num(status.current_number_scheduled),
        num(status.number_ready),
        num(status.updated_number_scheduled.unwrap_or(0)),
        num(status.number_available.unwrap_or(0)),
        text(format_labels(node_selector)),
        age(&ds.metadata, now),
        containers,
        images,
        text(format_label_selector(Some(&spec.selector))),
    ]
}

mod doc {
    pub const POD_NODE_SELECTOR: &str = "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node. More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-node/";
    pub const DAEMON_SET_DESIRED: &str = "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod). More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/";
    pub const DAEMON_SET_CURRENT: &str = "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod. More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/";
    pub const DAEMON_SET_READY: &str = "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.";
    pub const DAEMON_SET_UPDATED: &str =
        "The total number of nodes that are running updated daemon pod";
    pub const DAEMON_SET_AVAILABLE: &str = "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)";
    pub const DAEMON_SET_SELECTOR: &str = "A label query over pods that are managed by the daemon set. Must match in order to be controlled. If empty, defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::table::testing::*;

    #[test]
    fn daemon_set_row() {
        let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"foo": "bar"}},
                     "template": {"spec": {"nodeSelector": {"kubernetes.io/os": "linux"},
                                           "containers": [{"name": "fake-container1", "image": "fake-image1"},
                                                          {"name": "fake-container2", "image": "fake-image2"}]}}},
            "status": {"currentNumberScheduled": 2, "desiredNumberScheduled": 3, "numberReady": 1,
                       "updatedNumberScheduled": 2, "numberAvailable": 0, "numberMisscheduled": 0}});
        assert_eq!(
            row_of::<DaemonSet>(ds),
            vec![
                json!("agent"),
                json!(3),
                json!(2),
                json!(1),
                json!(2),
                json!(0),
                json!("kubernetes.io/os=linux"),
                json!("<unknown>"),
                json!("fake-container1,fake-container2"),
                json!("fake-image1,fake-image2"),
                json!("foo=bar")
            ]
        );
    }
}
