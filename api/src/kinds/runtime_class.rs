//! node.k8s.io RuntimeClasses: named container runtime configurations pods select with
//! `runtimeClassName`. The handler is what the kubelet hands to the CRI, so it must be a DNS
//! label and may never change under the pods already running with it; the overhead and
//! scheduling constraints are merged into pods at admission and get the pod rules for
//! resources, node selectors and tolerations.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::api::node::v1::{Overhead, RuntimeClass, Scheduling};
use serde_json::Value;

use super::resource_quota::{validate_container_resource_name, validate_quantity_value};
use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, name, string, text};
use crate::validation::{
    ErrorKind, Errors, FieldError, Path, dns1123_label, immutable, label_value, qualified_name,
    validate_labels,
};

impl Kind for RuntimeClass {
    const COLUMNS: &'static [Column] = RUNTIME_CLASS_COLUMNS;

    fn validate(&self, errs: &mut Errors) {
        for msg in dns1123_label(&self.handler) {
            errs.push(FieldError::invalid(
                &Path::new("handler"),
                &self.handler,
                msg,
            ));
        }
        if let Some(overhead) = &self.overhead {
            validate_overhead(overhead, &Path::new("overhead"), errs);
        }
        if let Some(scheduling) = &self.scheduling {
            validate_scheduling(scheduling, &Path::new("scheduling"), errs);
        }
    }

    /// Upstream validates only the handler's immutability on update.
    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        immutable(&self.handler, &old.handler, &Path::new("handler"), errs);
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(runtime_class_cells(self, now))
    }
}

/// The overhead as a container's limits (upstream reuses that validation, paths included).
fn validate_overhead(overhead: &Overhead, path: &Path, errs: &mut Errors) {
    let limits = path.child("limits");
    let mut compute = false;
    let mut hugepages = false;
    for (k, q) in overhead.pod_fixed.iter().flatten() {
        let p = limits.key(k);
        validate_container_resource_name(k, &p, errs);
        validate_quantity_value(k, q, &p, errs);
        compute |= k == "cpu" || k == "memory";
        hugepages |= k.starts_with("hugepages-");
    }
    if hugepages && !compute {
        errs.push(FieldError::forbidden(
            path,
            "HugePages require cpu or memory",
        ));
    }
}

fn validate_scheduling(scheduling: &Scheduling, path: &Path, errs: &mut Errors) {
    if let Some(selector) = &scheduling.node_selector {
        validate_labels(selector, &path.child("nodeSelector"), errs);
    }
    for (i, t) in scheduling.tolerations.iter().flatten().enumerate() {
        validate_toleration(t, &path.child("tolerations").index(i), errs);
    }
}

const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// Upstream's ValidateTolerations, for one toleration.
fn validate_toleration(t: &Toleration, p: &Path, errs: &mut Errors) {
    let key = t.key.as_deref().unwrap_or("");
    let operator = t.operator.as_deref().unwrap_or("");
    let value = t.value.as_deref().unwrap_or("");
    let effect = t.effect.as_deref().unwrap_or("");
    if !key.is_empty() {
        for msg in qualified_name(key) {
            errs.push(FieldError::invalid(&p.child("key"), key, msg));
        }
    }
    // An empty key with Exists (and no value) tolerates every taint.
    if key.is_empty() && operator != "Exists" {
        errs.push(FieldError::invalid(
            &p.child("operator"),
            operator,
            "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
        ));
    }
    if t.toleration_seconds.is_some() && effect != "NoExecute" {
        errs.push(FieldError::invalid(
            &p.child("effect"),
            effect,
            "effect must be 'NoExecute' when `tolerationSeconds` is set",
        ));
    }
    match operator {
        "Equal" | "" => {
            let msgs = label_value(value);
            if !msgs.is_empty() {
                errs.push(FieldError::invalid(
                    &p.child("operator"),
                    value,
                    msgs.join(";"),
                ));
            }
        }
        "Exists" if !value.is_empty() => errs.push(FieldError::new(
            ErrorKind::Invalid,
            &p.child("operator"),
            None,
            "value must be empty when `operator` is 'Exists'",
        )),
        "Exists" => {}
        op => errs.push(FieldError::not_supported(
            &p.child("operator"),
            op,
            &["Equal", "Exists"],
        )),
    }
    if !effect.is_empty() && !TAINT_EFFECTS.contains(&effect) {
        errs.push(FieldError::not_supported(
            &p.child("effect"),
            effect,
            TAINT_EFFECTS,
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

/// Upstream describes Handler with ObjectMeta's (absent) `handler` doc: empty.
const RUNTIME_CLASS_COLUMNS: &[Column] = &[NAME, string("Handler", ""), AGE];

fn runtime_class_cells(rc: &RuntimeClass, now: Timestamp) -> Vec<Value> {
    vec![
        name(&rc.metadata),
        text(rc.handler.clone()),
        age(&rc.metadata, now),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    fn runtime_class(body: Value) -> RuntimeClass {
        let mut base = json!({"metadata": {"name": "gvisor"}, "handler": "runsc"});
        for (k, v) in body.as_object().unwrap() {
            base[k] = v.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    fn errors(rc: &RuntimeClass) -> Vec<String> {
        let mut errs = Vec::new();
        rc.validate(&mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn validation() {
        let ok = runtime_class(json!({
            "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
            "scheduling": {"nodeSelector": {"runtime": "gvisor"},
                           "tolerations": [{"key": "runtime", "operator": "Equal", "value": "gvisor", "effect": "NoSchedule"},
                                           {"operator": "Exists"}]}}));
        assert_eq!(errors(&ok), Vec::<String>::new());
        assert_eq!(
            errors(&runtime_class(json!({"handler": "Run_SC",
                "overhead": {"podFixed": {"cpu": "-1", "pods": "1"}}}))),
            vec![
                "handler: Invalid value: \"Run_SC\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                "overhead.limits[cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
                "overhead.limits[pods]: Invalid value: \"pods\": must be a standard resource for containers",
            ]
        );
        assert_eq!(
            errors(&runtime_class(json!({"scheduling": {"tolerations": [
                {"operator": "Equal", "tolerationSeconds": 5},
                {"key": "k", "operator": "Exists", "value": "v", "effect": "Sometimes"},
                {"key": "k", "operator": "Like"}]}}))),
            vec![
                "scheduling.tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
                "scheduling.tolerations[0].effect: Invalid value: \"\": effect must be 'NoExecute' when `tolerationSeconds` is set",
                "scheduling.tolerations[1].operator: Invalid value: value must be empty when `operator` is 'Exists'",
                "scheduling.tolerations[1].effect: Unsupported value: \"Sometimes\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"",
                "scheduling.tolerations[2].operator: Unsupported value: \"Like\": supported values: \"Equal\", \"Exists\"",
            ]
        );
    }

    #[test]
    fn handler_is_immutable() {
        let old = runtime_class(json!({}));
        let new = runtime_class(json!({"handler": "kata", "overhead": {"podFixed": {"cpu": "1"}}}));
        let mut errs = Vec::new();
        new.validate_update(&old, &mut errs);
        assert_eq!(
            errs.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec!["handler: Invalid value: \"kata\": field is immutable"]
        );
    }

    #[test]
    fn runtime_class_row() {
        let rc = json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": "gvisor", "creationTimestamp": ago(5)}, "handler": "runsc"});
        assert_eq!(
            row_of::<RuntimeClass>(rc),
            vec![json!("gvisor"), json!("runsc"), json!("5s")]
        );
    }
}
