//! Upstream's HorizontalPodAutoscaler validation (pkg/apis/autoscaling/validation), rule for
//! rule with its field paths and messages, so that a 422 reads as Kubernetes' does. Every
//! version is validated in its autoscaling/v2 form, as upstream validates the internal one:
//! an autoscaling/v1 `targetCPUUtilizationPercentage` of 0 is reported at
//! `spec.metrics[i].resource.target.averageUtilization`.
//!
//! Not enforced: the `scaleTargetRef.apiVersion` group check of Kubernetes 1.34+ (this server
//! answers as 1.32) and scaling to zero replicas (the `HPAScaleToZero` feature gate is off).

use k8s_openapi::api::autoscaling::v2::{
    ContainerResourceMetricSource, CrossVersionObjectReference, ExternalMetricSource,
    HPAScalingPolicy, HPAScalingRules, HorizontalPodAutoscalerBehavior,
    HorizontalPodAutoscalerSpec, HorizontalPodAutoscalerStatus, MetricIdentifier, MetricSpec,
    MetricTarget, ObjectMetricSource, PodsMetricSource, ResourceMetricSource,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity;
use crate::validation::{
    Errors, FieldError, Path, dns1123_label, path_segment_name, qualified_name,
};

/// The longest scaling policy period, in seconds.
const MAX_PERIOD_SECONDS: i32 = 1800;
/// The longest stabilization window, in seconds.
const MAX_STABILIZATION_WINDOW_SECONDS: i32 = 3600;

const METRIC_SOURCE_TYPES: &[&str] = &[
    "ContainerResource",
    "External",
    "Object",
    "Pods",
    "Resource",
];
const SELECT_POLICIES: &[&str] = &["Disabled", "Max", "Min"];
const POLICY_TYPES: &[&str] = &["Percent", "Pods"];

/// Upstream's `validateHorizontalPodAutoscalerSpec`; `min_replicas_lower_bound` is 1, or 0
/// for an update of an object that already scales to zero.
pub(super) fn validate_spec(
    spec: &HorizontalPodAutoscalerSpec,
    path: &Path,
    min_replicas_lower_bound: i32,
    errs: &mut Errors,
) {
    if let Some(min) = spec.min_replicas
        && min < min_replicas_lower_bound
    {
        errs.push(FieldError::invalid(
            &path.child("minReplicas"),
            min,
            format!("must be greater than or equal to {min_replicas_lower_bound}"),
        ));
    }
    if spec.max_replicas < 1 {
        errs.push(FieldError::invalid(
            &path.child("maxReplicas"),
            spec.max_replicas,
            "must be greater than 0",
        ));
    }
    if let Some(min) = spec.min_replicas
        && spec.max_replicas < min
    {
        errs.push(FieldError::invalid(
            &path.child("maxReplicas"),
            spec.max_replicas,
            "must be greater than or equal to `minReplicas`",
        ));
    }
    validate_reference(&spec.scale_target_ref, &path.child("scaleTargetRef"), errs);
    validate_metrics(
        spec.metrics.as_deref().unwrap_or_default(),
        &path.child("metrics"),
        spec.min_replicas,
        errs,
    );
    if let Some(behavior) = &spec.behavior {
        validate_behavior(behavior, &path.child("behavior"), errs);
    }
}

/// Upstream's `ValidateHorizontalPodAutoscalerStatusUpdate`, less the metadata.
pub(super) fn validate_status(status: &HorizontalPodAutoscalerStatus, errs: &mut Errors) {
    let path = Path::new("status");
    let current = status.current_replicas.unwrap_or(0);
    if current < 0 {
        errs.push(FieldError::invalid(
            &path.child("currentReplicas"),
            current,
            "must be greater than or equal to 0",
        ));
    }
    if status.desired_replicas < 0 {
        errs.push(FieldError::invalid(
            &path.child("desiredReplicas"),
            status.desired_replicas,
            "must be greater than or equal to 0",
        ));
    }
}

/// Upstream's `ValidateCrossVersionObjectReference`: kind and name, each a valid path segment.
fn validate_reference(r: &CrossVersionObjectReference, path: &Path, errs: &mut Errors) {
    for (field, value) in [("kind", &r.kind), ("name", &r.name)] {
        if value.is_empty() {
            errs.push(FieldError::required(&path.child(field), ""));
        } else {
            for msg in path_segment_name(value) {
                errs.push(FieldError::invalid(&path.child(field), value, msg));
            }
        }
    }
}

fn validate_metrics(
    metrics: &[MetricSpec],
    path: &Path,
    min_replicas: Option<i32>,
    errs: &mut Errors,
) {
    for (i, metric) in metrics.iter().enumerate() {
        validate_metric_spec(metric, &path.index(i), errs);
    }
    let scales_on_objects = metrics
        .iter()
        .any(|m| m.type_ == "Object" || m.type_ == "External");
    if min_replicas == Some(0) && !scales_on_objects {
        errs.push(FieldError::forbidden(
            path,
            "must specify at least one Object or External metric to support scaling to zero replicas",
        ));
    }
}

/// Upstream's `validateMetricSpec`: a known type, the source of that type, and no other.
fn validate_metric_spec(spec: &MetricSpec, path: &Path, errs: &mut Errors) {
    let type_path = path.child("type");
    if spec.type_.is_empty() {
        errs.push(FieldError::required(
            &type_path,
            "must specify a metric source type",
        ));
    }
    if !METRIC_SOURCE_TYPES.contains(&spec.type_.as_str()) {
        errs.push(FieldError::not_supported(
            &type_path,
            &spec.type_,
            METRIC_SOURCE_TYPES,
        ));
    }
    // Only the first source set is validated; any other is an error below.
    let mut present: Vec<&str> = Vec::new();
    if let Some(src) = &spec.object {
        present.push("object");
        if present.len() == 1 {
            validate_object_source(src, &path.child("object"), errs);
        }
    }
    if let Some(src) = &spec.external {
        present.push("external");
        if present.len() == 1 {
            validate_external_source(src, &path.child("external"), errs);
        }
    }
    if let Some(src) = &spec.pods {
        present.push("pods");
        if present.len() == 1 {
            validate_pods_source(src, &path.child("pods"), errs);
        }
    }
    if let Some(src) = &spec.resource {
        present.push("resource");
        if present.len() == 1 {
            validate_resource_source(src, &path.child("resource"), errs);
        }
    }
    if let Some(src) = &spec.container_resource {
        present.push("containerResource");
        if present.len() == 1 {
            validate_container_resource_source(src, &path.child("containerResource"), errs);
        }
    }
    let expected = match spec.type_.as_str() {
        "Object" => Some(("object", spec.object.is_some())),
        "Pods" => Some(("pods", spec.pods.is_some())),
        "Resource" => Some(("resource", spec.resource.is_some())),
        "External" => Some(("external", spec.external.is_some())),
        "ContainerResource" => Some(("containerResource", spec.container_resource.is_some())),
        _ => None,
    };
    match expected {
        Some((field, false)) => errs.push(FieldError::required(
            &path.child(field),
            "must populate information for the given metric source",
        )),
        Some(_) => {}
        // Upstream reports an unknown type twice; the Status message lists it once.
        None => errs.push(FieldError::not_supported(
            &type_path,
            &spec.type_,
            METRIC_SOURCE_TYPES,
        )),
    }
    if present.len() != 1 {
        let expected = expected.map(|(field, _)| field);
        for field in present.into_iter().filter(|f| Some(*f) != expected) {
            errs.push(FieldError::forbidden(
                &path.child(field),
                "must populate the given metric source only",
            ));
        }
    }
}

fn validate_object_source(src: &ObjectMetricSource, path: &Path, errs: &mut Errors) {
    validate_reference(&src.described_object, &path.child("describedObject"), errs);
    validate_metric_identifier(&src.metric, &path.child("metric"), errs);
    let target = path.child("target");
    validate_metric_target(&src.target, &target, errs);
    if src.target.value.is_none() && src.target.average_value.is_none() {
        errs.push(FieldError::required(
            &target.child("averageValue"),
            "must set either a target value or averageValue",
        ));
    }
}

fn validate_external_source(src: &ExternalMetricSource, path: &Path, errs: &mut Errors) {
    validate_metric_identifier(&src.metric, &path.child("metric"), errs);
    let target = path.child("target");
    validate_metric_target(&src.target, &target, errs);
    match (&src.target.value, &src.target.average_value) {
        (None, None) => errs.push(FieldError::required(
            &target.child("averageValue"),
            "must set either a target value for metric or a per-pod target",
        )),
        (Some(_), Some(_)) => errs.push(FieldError::forbidden(
            &target.child("value"),
            "may not set both a target value for metric and a per-pod target",
        )),
        _ => {}
    }
}

fn validate_pods_source(src: &PodsMetricSource, path: &Path, errs: &mut Errors) {
    validate_metric_identifier(&src.metric, &path.child("metric"), errs);
    let target = path.child("target");
    validate_metric_target(&src.target, &target, errs);
    if src.target.average_value.is_none() {
        errs.push(FieldError::required(
            &target.child("averageValue"),
            "must specify a positive target averageValue",
        ));
    }
}

fn validate_resource_source(src: &ResourceMetricSource, path: &Path, errs: &mut Errors) {
    if src.name.is_empty() {
        errs.push(FieldError::required(
            &path.child("name"),
            "must specify a resource name",
        ));
    }
    validate_resource_target(&src.target, &path.child("target"), errs);
}

fn validate_container_resource_source(
    src: &ContainerResourceMetricSource,
    path: &Path,
    errs: &mut Errors,
) {
    let name = path.child("name");
    if src.name.is_empty() {
        errs.push(FieldError::required(&name, "must specify a resource name"));
    } else {
        validate_container_resource_name(&src.name, &name, errs);
    }
    let container = path.child("container");
    if src.container.is_empty() {
        errs.push(FieldError::required(&container, "must specify a container"));
    } else {
        for msg in dns1123_label(&src.container) {
            errs.push(FieldError::invalid(&container, &src.container, msg));
        }
    }
    validate_resource_target(&src.target, &path.child("target"), errs);
}

/// The target of a Resource or ContainerResource metric: a utilization or an average value,
/// not both.
fn validate_resource_target(target: &MetricTarget, path: &Path, errs: &mut Errors) {
    validate_metric_target(target, path, errs);
    match (&target.average_utilization, &target.average_value) {
        (None, None) => errs.push(FieldError::required(
            &path.child("averageUtilization"),
            "must set either a target raw value or a target utilization",
        )),
        (Some(_), Some(_)) => errs.push(FieldError::forbidden(
            &path.child("averageValue"),
            "may not set both a target raw value and a target utilization",
        )),
        _ => {}
    }
}

fn validate_metric_target(target: &MetricTarget, path: &Path, errs: &mut Errors) {
    let type_path = path.child("type");
    if target.type_.is_empty() {
        errs.push(FieldError::required(
            &type_path,
            "must specify a metric target type",
        ));
    }
    if !["Utilization", "Value", "AverageValue"].contains(&target.type_.as_str()) {
        errs.push(FieldError::invalid(
            &type_path,
            &target.type_,
            "must be either Utilization, Value, or AverageValue",
        ));
    }
    for (field, value) in [
        ("value", &target.value),
        ("averageValue", &target.average_value),
    ] {
        if let Some(q) = value
            && !is_positive(q)
        {
            // Upstream prints the Go struct of the quantity here; its text reads better.
            errs.push(FieldError::invalid(
                &path.child(field),
                &q.0,
                "must be positive",
            ));
        }
    }
    if let Some(u) = target.average_utilization
        && u < 1
    {
        errs.push(FieldError::invalid(
            &path.child("averageUtilization"),
            u,
            "must be greater than 0",
        ));
    }
}

fn validate_metric_identifier(id: &MetricIdentifier, path: &Path, errs: &mut Errors) {
    let name = path.child("name");
    if id.name.is_empty() {
        errs.push(FieldError::required(&name, "must specify a metric name"));
    } else {
        for msg in path_segment_name(&id.name) {
            errs.push(FieldError::invalid(&name, &id.name, msg));
        }
    }
}

fn validate_behavior(behavior: &HorizontalPodAutoscalerBehavior, path: &Path, errs: &mut Errors) {
    for (field, rules) in [
        ("scaleUp", &behavior.scale_up),
        ("scaleDown", &behavior.scale_down),
    ] {
        if let Some(rules) = rules {
            validate_scaling_rules(rules, &path.child(field), errs);
        }
    }
}

fn validate_scaling_rules(rules: &HPAScalingRules, path: &Path, errs: &mut Errors) {
    if let Some(window) = rules.stabilization_window_seconds {
        let window_path = path.child("stabilizationWindowSeconds");
        if window < 0 {
            errs.push(FieldError::invalid(
                &window_path,
                window,
                "must be greater than or equal to zero",
            ));
        }
        if window > MAX_STABILIZATION_WINDOW_SECONDS {
            errs.push(FieldError::invalid(
                &window_path,
                window,
                format!("must be less than or equal to {MAX_STABILIZATION_WINDOW_SECONDS}"),
            ));
        }
    }
    if let Some(select) = &rules.select_policy
        && !SELECT_POLICIES.contains(&select.as_str())
    {
        errs.push(FieldError::not_supported(
            &path.child("selectPolicy"),
            select,
            SELECT_POLICIES,
        ));
    }
    let policies_path = path.child("policies");
    let policies = rules.policies.as_deref().unwrap_or_default();
    if policies.is_empty() {
        errs.push(FieldError::required(
            &policies_path,
            "must specify at least one Policy",
        ));
    }
    for (i, policy) in policies.iter().enumerate() {
        validate_scaling_policy(policy, &policies_path.index(i), errs);
    }
    if let Some(tolerance) = &rules.tolerance
        && quantity::Quantity::parse(&tolerance.0).is_none_or(|q| q.is_negative())
    {
        errs.push(FieldError::invalid(
            &path.child("tolerance"),
            &tolerance.0,
            "must be greater than or equal to 0",
        ));
    }
}

fn validate_scaling_policy(policy: &HPAScalingPolicy, path: &Path, errs: &mut Errors) {
    if !POLICY_TYPES.contains(&policy.type_.as_str()) {
        errs.push(FieldError::not_supported(
            &path.child("type"),
            &policy.type_,
            POLICY_TYPES,
        ));
    }
    if policy.value <= 0 {
        errs.push(FieldError::invalid(
            &path.child("value"),
            policy.value,
            "must be greater than zero",
        ));
    }
    let period = path.child("periodSeconds");
    if policy.period_seconds <= 0 {
        errs.push(FieldError::invalid(
            &period,
            policy.period_seconds,
            "must be greater than zero",
        ));
    }
    if policy.period_seconds > MAX_PERIOD_SECONDS {
        errs.push(FieldError::invalid(
            &period,
            policy.period_seconds,
            format!("must be less than or equal to {MAX_PERIOD_SECONDS}"),
        ));
    }
}

fn is_positive(q: &Quantity) -> bool {
    quantity::Quantity::parse(&q.0).is_some_and(|q| q.is_positive())
}

/// Upstream's `ValidateContainerResourceName` (core/v1 validation): a qualified name that is
/// a standard container resource, a `kubernetes.io/` one, or an extended resource.
fn validate_container_resource_name(name: &str, path: &Path, errs: &mut Errors) {
    let qualified = qualified_name(name);
    let is_qualified = qualified.is_empty();
    for msg in qualified {
        errs.push(FieldError::invalid(path, name, msg));
    }
    let hugepages = |n: &str| n.starts_with("hugepages-");
    if !name.contains('/') {
        if is_qualified
            && !crate::kinds::resource_quota::STANDARD_RESOURCES.contains(&name)
            && !hugepages(name)
            && !name.starts_with("requests.hugepages-")
        {
            errs.push(FieldError::invalid(
                path,
                name,
                "must be a standard resource type or fully qualified",
            ));
        }
        if !["cpu", "memory", "ephemeral-storage"].contains(&name) && !hugepages(name) {
            errs.push(FieldError::invalid(
                path,
                name,
                "must be a standard resource for containers",
            ));
        }
    } else if !name.contains("kubernetes.io/")
        && (name.starts_with("requests.")
            || !qualified_name(&format!("requests.{name}")).is_empty())
    {
        errs.push(FieldError::invalid(
            path,
            name,
            "doesn't follow extended resource name standard",
        ));
    }
}

#[cfg(test)]
mod tests;
