use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use serde_json::{Value, json};

use crate::strategy::Kind;
use crate::validation::ErrorKind;

fn hpa(spec: Value) -> HorizontalPodAutoscaler {
    let mut base = json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "maxReplicas": 5}
    });
    let fields = base["spec"].as_object_mut().unwrap();
    for (k, v) in spec.as_object().unwrap() {
        fields.insert(k.clone(), v.clone());
    }
    let mut hpa: HorizontalPodAutoscaler = serde_json::from_value(base).unwrap();
    hpa.default_fields();
    hpa
}

/// Each error as `field: reason: detail`.
fn errors(hpa: &HorizontalPodAutoscaler) -> Vec<String> {
    let mut errs = Vec::new();
    hpa.validate(&mut errs);
    errs.iter()
        .map(|e| format!("{}: {}: {}", e.field, e.kind.reason(), e.detail))
        .collect()
}

fn metric(m: Value) -> HorizontalPodAutoscaler {
    hpa(json!({"metrics": [m]}))
}

#[test]
fn a_full_object_is_valid() {
    let ok = hpa(json!({
        "minReplicas": 1,
        "metrics": [
            {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}},
            {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "1Gi"}}},
            {"type": "ContainerResource", "containerResource": {"name": "cpu", "container": "app",
                "target": {"type": "Utilization", "averageUtilization": 60}}},
            {"type": "Pods", "pods": {"metric": {"name": "rps"}, "target": {"type": "AverageValue", "averageValue": "10"}}},
            {"type": "Object", "object": {"metric": {"name": "hits"}, "describedObject": {"kind": "Service", "name": "s"},
                "target": {"type": "Value", "value": "1k"}}},
            {"type": "External", "external": {"metric": {"name": "queue"}, "target": {"type": "AverageValue", "averageValue": "3"}}}
        ],
        "behavior": {"scaleUp": {"selectPolicy": "Disabled"},
                     "scaleDown": {"stabilizationWindowSeconds": 3600,
                                   "policies": [{"type": "Pods", "value": 1, "periodSeconds": 1800}]}}
    }));
    assert_eq!(errors(&ok), Vec::<String>::new());
}

#[test]
fn replicas_and_target() {
    assert_eq!(
        errors(&hpa(json!({"minReplicas": 0, "maxReplicas": 0}))),
        vec![
            "spec.minReplicas: FieldValueInvalid: must be greater than or equal to 1",
            "spec.maxReplicas: FieldValueInvalid: must be greater than 0",
            "spec.metrics: FieldValueForbidden: must specify at least one Object or External metric to support scaling to zero replicas",
        ]
    );
    assert_eq!(
        errors(&hpa(json!({"minReplicas": 3, "maxReplicas": 2}))),
        vec!["spec.maxReplicas: FieldValueInvalid: must be greater than or equal to `minReplicas`"]
    );
    assert_eq!(
        errors(&hpa(json!({"scaleTargetRef": {"kind": "", "name": ""}}))),
        vec![
            "spec.scaleTargetRef.kind: FieldValueRequired: ",
            "spec.scaleTargetRef.name: FieldValueRequired: ",
        ]
    );
    assert_eq!(
        errors(&hpa(
            json!({"scaleTargetRef": {"kind": "..", "name": "a/b%c"}})
        )),
        vec![
            "spec.scaleTargetRef.kind: FieldValueInvalid: may not be '..'",
            "spec.scaleTargetRef.name: FieldValueInvalid: may not contain '/'",
            "spec.scaleTargetRef.name: FieldValueInvalid: may not contain '%'",
        ]
    );
    // No spec at all is an empty one, as Go's struct is.
    let mut bare: HorizontalPodAutoscaler =
        serde_json::from_value(json!({"metadata": {"name": "web"}})).unwrap();
    bare.default_fields();
    let fields: Vec<String> = errors(&bare)
        .iter()
        .map(|e| e.split(':').next().unwrap().to_string())
        .collect();
    assert_eq!(
        fields,
        vec![
            "spec.maxReplicas",
            "spec.maxReplicas",
            "spec.scaleTargetRef.kind",
            "spec.scaleTargetRef.name"
        ]
    );
}

#[test]
fn metric_types_and_sources() {
    assert_eq!(
        errors(&metric(json!({"type": ""}))),
        vec![
            "spec.metrics[0].type: FieldValueRequired: must specify a metric source type",
            "spec.metrics[0].type: FieldValueNotSupported: supported values: \"ContainerResource\", \"External\", \"Object\", \"Pods\", \"Resource\"",
            "spec.metrics[0].type: FieldValueNotSupported: supported values: \"ContainerResource\", \"External\", \"Object\", \"Pods\", \"Resource\"",
        ]
    );
    assert_eq!(
        errors(&metric(json!({"type": "Pods"}))),
        vec![
            "spec.metrics[0].pods: FieldValueRequired: must populate information for the given metric source"
        ]
    );
    // Only the first source set is validated; the one the type names is kept, others fail.
    let two = metric(json!({"type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 0}},
        "pods": {"metric": {"name": "rps"}, "target": {"type": "AverageValue", "averageValue": "1"}}}));
    assert_eq!(
        errors(&two),
        vec![
            "spec.metrics[0].pods: FieldValueForbidden: must populate the given metric source only"
        ]
    );
}

#[test]
fn targets() {
    let resource = |target: Value| {
        errors(&metric(
            json!({"type": "Resource", "resource": {"name": "cpu", "target": target}}),
        ))
    };
    assert_eq!(
        resource(json!({"type": "Utilization"})),
        vec![
            "spec.metrics[0].resource.target.averageUtilization: FieldValueRequired: must set either a target raw value or a target utilization"
        ]
    );
    assert_eq!(
        resource(json!({"type": "Utilization", "averageUtilization": 0})),
        vec![
            "spec.metrics[0].resource.target.averageUtilization: FieldValueInvalid: must be greater than 0"
        ]
    );
    assert_eq!(
        resource(json!({"type": "Ratio", "averageUtilization": 5, "averageValue": "0"})),
        vec![
            "spec.metrics[0].resource.target.type: FieldValueInvalid: must be either Utilization, Value, or AverageValue",
            "spec.metrics[0].resource.target.averageValue: FieldValueInvalid: must be positive",
            "spec.metrics[0].resource.target.averageValue: FieldValueForbidden: may not set both a target raw value and a target utilization",
        ]
    );
    assert_eq!(
        resource(json!({"averageValue": "-1"})),
        vec![
            "spec.metrics[0].resource.target.type: FieldValueRequired: must specify a metric target type",
            "spec.metrics[0].resource.target.type: FieldValueInvalid: must be either Utilization, Value, or AverageValue",
            "spec.metrics[0].resource.target.averageValue: FieldValueInvalid: must be positive",
        ]
    );
    assert_eq!(
        errors(&metric(json!({"type": "Resource", "resource": {"name": "",
            "target": {"type": "AverageValue", "averageValue": "1"}}}))),
        vec!["spec.metrics[0].resource.name: FieldValueRequired: must specify a resource name"]
    );
    // A Pods metric takes an average value only: a utilization does not do.
    assert_eq!(
        errors(&metric(
            json!({"type": "Pods", "pods": {"metric": {"name": ""},
            "target": {"type": "Utilization", "averageUtilization": 50}}})
        )),
        vec![
            "spec.metrics[0].pods.metric.name: FieldValueRequired: must specify a metric name",
            "spec.metrics[0].pods.target.averageValue: FieldValueRequired: must specify a positive target averageValue",
        ]
    );
    assert_eq!(
        errors(&metric(
            json!({"type": "Object", "object": {"metric": {"name": "a/b"},
            "describedObject": {"kind": "Service"}, "target": {"type": "Value", "value": "0"}}})
        )),
        vec![
            "spec.metrics[0].object.describedObject.name: FieldValueRequired: ",
            "spec.metrics[0].object.metric.name: FieldValueInvalid: may not contain '/'",
            "spec.metrics[0].object.target.value: FieldValueInvalid: must be positive",
        ]
    );
    assert_eq!(
        errors(&metric(
            json!({"type": "Object", "object": {"metric": {"name": "q"},
            "describedObject": {"kind": "Service", "name": "s"}, "target": {"type": "Value"}}})
        )),
        vec![
            "spec.metrics[0].object.target.averageValue: FieldValueRequired: must set either a target value or averageValue"
        ]
    );
    assert_eq!(
        errors(&metric(
            json!({"type": "External", "external": {"metric": {"name": "q"},
            "target": {"type": "Value", "value": "1", "averageValue": "1"}}})
        )),
        vec![
            "spec.metrics[0].external.target.value: FieldValueForbidden: may not set both a target value for metric and a per-pod target"
        ]
    );
    assert_eq!(
        errors(&metric(
            json!({"type": "External", "external": {"metric": {"name": "q"},
            "target": {"type": "Value"}}})
        )),
        vec![
            "spec.metrics[0].external.target.averageValue: FieldValueRequired: must set either a target value for metric or a per-pod target"
        ]
    );
}

#[test]
fn container_resources() {
    let container = |name: &str, container: &str| {
        errors(&metric(
            json!({"type": "ContainerResource", "containerResource": {
            "name": name, "container": container,
            "target": {"type": "Utilization", "averageUtilization": 50}}}),
        ))
    };
    assert_eq!(
        container("", ""),
        vec![
            "spec.metrics[0].containerResource.name: FieldValueRequired: must specify a resource name",
            "spec.metrics[0].containerResource.container: FieldValueRequired: must specify a container",
        ]
    );
    assert_eq!(
        container("pods", "App"),
        vec![
            "spec.metrics[0].containerResource.name: FieldValueInvalid: must be a standard resource for containers",
            "spec.metrics[0].containerResource.container: FieldValueInvalid: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        ]
    );
    assert_eq!(container("hugepages-2Mi", "app"), Vec::<String>::new());
    assert_eq!(container("example.com/gpu", "app"), Vec::<String>::new());
    assert_eq!(
        container("gpus", "app"),
        vec![
            "spec.metrics[0].containerResource.name: FieldValueInvalid: must be a standard resource type or fully qualified",
            "spec.metrics[0].containerResource.name: FieldValueInvalid: must be a standard resource for containers",
        ]
    );
}

#[test]
fn behavior() {
    let rules = |up: Value| errors(&hpa(json!({"behavior": {"scaleUp": up}})));
    assert_eq!(
        rules(json!({"stabilizationWindowSeconds": -1, "selectPolicy": "Most", "policies": []})),
        vec![
            "spec.behavior.scaleUp.stabilizationWindowSeconds: FieldValueInvalid: must be greater than or equal to zero",
            "spec.behavior.scaleUp.selectPolicy: FieldValueNotSupported: supported values: \"Disabled\", \"Max\", \"Min\"",
            "spec.behavior.scaleUp.policies: FieldValueRequired: must specify at least one Policy",
        ]
    );
    assert_eq!(
        rules(json!({"stabilizationWindowSeconds": 3601,
            "policies": [{"type": "Nodes", "value": 0, "periodSeconds": 1801},
                         {"type": "Pods", "value": 1, "periodSeconds": 0}]})),
        vec![
            "spec.behavior.scaleUp.stabilizationWindowSeconds: FieldValueInvalid: must be less than or equal to 3600",
            "spec.behavior.scaleUp.policies[0].type: FieldValueNotSupported: supported values: \"Percent\", \"Pods\"",
            "spec.behavior.scaleUp.policies[0].value: FieldValueInvalid: must be greater than zero",
            "spec.behavior.scaleUp.policies[0].periodSeconds: FieldValueInvalid: must be less than or equal to 1800",
            "spec.behavior.scaleUp.policies[1].periodSeconds: FieldValueInvalid: must be greater than zero",
        ]
    );
    // Disabled scaling still names policies: defaulting fills them in when none are given.
    assert_eq!(
        rules(json!({"selectPolicy": "Disabled"})),
        Vec::<String>::new()
    );
    assert_eq!(
        errors(&hpa(json!({"behavior": {"scaleDown": {"tolerance": "-0.1",
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 15}]}}}))),
        vec![
            "spec.behavior.scaleDown.tolerance: FieldValueInvalid: must be greater than or equal to 0"
        ]
    );
}

#[test]
fn updates() {
    let old = hpa(json!({"minReplicas": 2}));
    let mut new = old.clone();
    new.spec.as_mut().unwrap().min_replicas = Some(0);
    let mut errs = Vec::new();
    new.validate_update(&old, &mut errs);
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert_eq!(errs[0].kind, ErrorKind::Invalid);
    assert_eq!(errs[1].field, "spec.metrics");

    // An object already at zero replicas may stay there, with an Object or External metric.
    let mut zero = hpa(
        json!({"metrics": [{"type": "External", "external": {"metric": {"name": "q"},
        "target": {"type": "Value", "value": "1"}}}]}),
    );
    zero.spec.as_mut().unwrap().min_replicas = Some(0);
    let mut again = zero.clone();
    again.spec.as_mut().unwrap().max_replicas = 6;
    let mut errs = Vec::new();
    again.validate_update(&zero, &mut errs);
    assert_eq!(errs, vec![]);

    // A status write is validated on the status.
    let mut status = old.clone();
    status.status = Some(
        serde_json::from_value(json!({"currentReplicas": -1, "desiredReplicas": -2})).unwrap(),
    );
    let mut errs = Vec::new();
    status.validate_update(&old, &mut errs);
    let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        vec!["status.currentReplicas", "status.desiredReplicas"]
    );
}
