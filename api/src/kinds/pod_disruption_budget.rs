//! policy/v1 PodDisruptionBudgets: how many of an application's pods voluntary evictions may
//! take down at once. A budget that sets both bounds, or a percentage past 100%, has no single
//! meaning for the eviction API to enforce, so validation refuses it.

use jiff::Timestamp;
use k8s_openapi::api::policy::v1::{
    PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use crate::spec_and_status;
use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, integer, name, num, string, text};
use crate::validation::{
    ErrorKind, Errors, FieldError, Path, label_value, qualified_name, validate_labels,
};

const UNHEALTHY_POD_EVICTION_POLICIES: &[&str] = &["AlwaysAllow", "IfHealthyBudget"];

impl Kind for PodDisruptionBudget {
    const COLUMNS: &'static [Column] = PDB_COLUMNS;

    spec_and_status!(generation);

    fn prepare_create(&mut self) {
        self.status = Some(PodDisruptionBudgetStatus::default());
    }

    fn validate(&self, errs: &mut Errors) {
        if let Some(spec) = &self.spec {
            validate_spec(spec, &Path::new("spec"), errs);
        }
    }

    fn validate_update(&self, _old: &Self, errs: &mut Errors) {
        self.validate(errs);
        if let Some(status) = &self.status {
            validate_status(status, &Path::new("status"), errs);
        }
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(pdb_cells(self, now))
    }
}

fn validate_spec(spec: &PodDisruptionBudgetSpec, path: &Path, errs: &mut Errors) {
    if spec.min_available.is_some() && spec.max_unavailable.is_some() {
        errs.push(FieldError::new(
            ErrorKind::Invalid,
            path,
            None,
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    for (field, value) in [
        ("minAvailable", &spec.min_available),
        ("maxUnavailable", &spec.max_unavailable),
    ] {
        if let Some(v) = value {
            validate_int_or_percent(v, &path.child(field), errs);
        }
    }
    if let Some(selector) = &spec.selector {
        validate_label_selector(selector, &path.child("selector"), errs);
    }
    if let Some(policy) = &spec.unhealthy_pod_eviction_policy
        && !UNHEALTHY_POD_EVICTION_POLICIES.contains(&policy.as_str())
    {
        errs.push(FieldError::not_supported(
            &path.child("unhealthyPodEvictionPolicy"),
            policy,
            UNHEALTHY_POD_EVICTION_POLICIES,
        ));
    }
}

/// ValidatePositiveIntOrPercent and IsNotMoreThan100Percent.
fn validate_int_or_percent(v: &IntOrString, path: &Path, errs: &mut Errors) {
    match v {
        IntOrString::Int(n) if *n < 0 => errs.push(FieldError::invalid(
            path,
            n,
            "must be greater than or equal to 0",
        )),
        IntOrString::Int(_) => {}
        IntOrString::String(s) => {
            let digits = s.strip_suffix('%').filter(|d| !d.is_empty());
            match digits.filter(|d| d.bytes().all(|c| c.is_ascii_digit())) {
                None => errs.push(FieldError::invalid(
                    path,
                    s,
                    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                )),
                Some(d) if d.parse::<u64>().is_ok_and(|p| p > 100) => errs.push(
                    FieldError::invalid(path, s, "must not be greater than 100%"),
                ),
                Some(_) => {}
            }
        }
    }
}

/// metav1 ValidateLabelSelector: label rules for matchLabels, operators and values for
/// matchExpressions.
fn validate_label_selector(selector: &LabelSelector, path: &Path, errs: &mut Errors) {
    if let Some(labels) = &selector.match_labels {
        validate_labels(labels, &path.child("matchLabels"), errs);
    }
    for (i, req) in selector.match_expressions.iter().flatten().enumerate() {
        let p = path.child("matchExpressions").index(i);
        let values = req.values.as_deref().unwrap_or(&[]);
        match req.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(
                &p.child("values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::forbidden(
                &p.child("values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => errs.push(FieldError::invalid(
                &p.child("operator"),
                op,
                "not a valid selector operator",
            )),
        }
        for msg in qualified_name(&req.key) {
            errs.push(FieldError::invalid(&p.child("key"), &req.key, msg));
        }
        for (j, value) in values.iter().enumerate() {
            for msg in label_value(value) {
                errs.push(FieldError::invalid(&p.child("values").index(j), value, msg));
            }
        }
    }
}

/// ValidatePodDisruptionBudgetStatusUpdate's counts.
fn validate_status(status: &PodDisruptionBudgetStatus, path: &Path, errs: &mut Errors) {
    for (field, value) in [
        ("disruptionsAllowed", status.disruptions_allowed),
        ("currentHealthy", status.current_healthy),
        ("desiredHealthy", status.desired_healthy),
        ("expectedPods", status.expected_pods),
    ] {
        if value < 0 {
            errs.push(FieldError::invalid(
                &path.child(field),
                value,
                "must be greater than or equal to 0",
            ));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const PDB_COLUMNS: &[Column] = &[
    NAME,
    string(
        "Min Available",
        "The minimum number of pods that must be available.",
    ),
    string(
        "Max Unavailable",
        "The maximum number of pods that may be unavailable.",
    ),
    integer(
        "Allowed Disruptions",
        "Calculated number of pods that may be disrupted at this time.",
    ),
    AGE,
];

fn int_or_string(v: Option<&IntOrString>) -> String {
    match v {
        Some(IntOrString::Int(n)) => n.to_string(),
        Some(IntOrString::String(s)) => s.clone(),
        None => "N/A".to_string(),
    }
}

fn pdb_cells(pdb: &PodDisruptionBudget, now: Timestamp) -> Vec<Value> {
    let spec = pdb.spec.clone().unwrap_or_default();
    vec![
        name(&pdb.metadata),
        text(int_or_string(spec.min_available.as_ref())),
        text(int_or_string(spec.max_unavailable.as_ref())),
        num(pdb.status.as_ref().map_or(0, |s| s.disruptions_allowed)),
        age(&pdb.metadata, now),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    fn pdb(spec: Value) -> PodDisruptionBudget {
        serde_json::from_value(
            json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec}),
        )
        .unwrap()
    }

    fn errors(p: &PodDisruptionBudget) -> Vec<String> {
        let mut errs = Vec::new();
        p.validate(&mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn validation() {
        assert_eq!(
            errors(&pdb(
                json!({"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}},
                "unhealthyPodEvictionPolicy": "AlwaysAllow"})
            )),
            Vec::<String>::new()
        );
        assert_eq!(
            errors(&pdb(json!({"minAvailable": -1, "maxUnavailable": "120%"}))),
            vec![
                "spec: Invalid value: minAvailable and maxUnavailable cannot be both set",
                "spec.minAvailable: Invalid value: -1: must be greater than or equal to 0",
                "spec.maxUnavailable: Invalid value: \"120%\": must not be greater than 100%",
            ]
        );
        assert_eq!(
            errors(&pdb(
                json!({"maxUnavailable": "half", "unhealthyPodEvictionPolicy": "Never",
                "selector": {"matchExpressions": [{"key": "app", "operator": "In"},
                                                  {"key": "-x", "operator": "Exists", "values": ["a"]}]}})
            )),
            vec![
                "spec.maxUnavailable: Invalid value: \"half\": a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                "spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
                "spec.selector.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                "spec.selector.matchExpressions[1].key: Invalid value: \"-x\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
                "spec.unhealthyPodEvictionPolicy: Unsupported value: \"Never\": supported values: \"AlwaysAllow\", \"IfHealthyBudget\"",
            ]
        );
    }

    #[test]
    fn status_and_generation() {
        let mut p = pdb(json!({"minAvailable": 1}));
        p.prepare_create();
        assert_eq!(
            serde_json::to_value(&p.status).unwrap(),
            json!({"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0})
        );
        let mut changed = p.clone();
        changed.spec.as_mut().unwrap().min_available = Some(IntOrString::Int(2));
        assert_eq!(changed.spec_changed(&p), Some(true));
        changed.status.as_mut().unwrap().disruptions_allowed = -1;
        let mut errs = Vec::new();
        changed.validate_update(&p, &mut errs);
        assert_eq!(
            errs.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec![
                "status.disruptionsAllowed: Invalid value: -1: must be greater than or equal to 0"
            ]
        );
    }

    #[test]
    fn pdb_rows() {
        let row = |spec: Value, status: Value| {
            row_of::<PodDisruptionBudget>(
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "web", "creationTimestamp": ago(7200)},
                "spec": spec, "status": status}),
            )
        };
        assert_eq!(
            row(
                json!({"minAvailable": 2}),
                json!({"disruptionsAllowed": 1, "currentHealthy": 3,
                "desiredHealthy": 2, "expectedPods": 3})
            ),
            vec![
                json!("web"),
                json!("2"),
                json!("N/A"),
                json!(1),
                json!("120m")
            ]
        );
        assert_eq!(
            row(json!({"maxUnavailable": "25%"}), json!(null))[1..4],
            [json!("N/A"), json!("25%"), json!(0)]
        );
    }
}
