//! The annotations' formats: autoscaling/v1's metric types, which upstream keeps only to
//! write metrics in annotations, and the behavior as upstream marshals its internal Go type.
//! Clients read these annotations, so they are written as upstream writes them.

use k8s_openapi::api::autoscaling::v2;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::quantity;

// Fields that Go declares without `omitempty` are always written; quantities Go holds by
// value read "0" when unset.

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ReferenceV1 {
    kind: String,
    name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    api_version: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct MetricSpecV1 {
    #[serde(rename = "type")]
    type_: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    object: Option<ObjectSourceV1>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pods: Option<PodsSourceV1>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource: Option<ResourceSourceV1>,
    #[serde(skip_serializing_if = "Option::is_none")]
    container_resource: Option<ContainerResourceSourceV1>,
    #[serde(skip_serializing_if = "Option::is_none")]
    external: Option<ExternalSourceV1>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ObjectSourceV1 {
    target: ReferenceV1,
    metric_name: String,
    target_value: Quantity,
    #[serde(skip_serializing_if = "Option::is_none")]
    selector: Option<LabelSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    average_value: Option<Quantity>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct PodsSourceV1 {
    metric_name: String,
    target_average_value: Quantity,
    #[serde(skip_serializing_if = "Option::is_none")]
    selector: Option<LabelSelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ResourceSourceV1 {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_average_utilization: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_average_value: Option<Quantity>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ContainerResourceSourceV1 {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_average_utilization: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_average_value: Option<Quantity>,
    container: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ExternalSourceV1 {
    metric_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    metric_selector: Option<LabelSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_value: Option<Quantity>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_average_value: Option<Quantity>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct MetricStatusV1 {
    #[serde(rename = "type")]
    type_: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    object: Option<ObjectStatusV1>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pods: Option<PodsStatusV1>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource: Option<ResourceStatusV1>,
    #[serde(skip_serializing_if = "Option::is_none")]
    container_resource: Option<ContainerResourceStatusV1>,
    #[serde(skip_serializing_if = "Option::is_none")]
    external: Option<ExternalStatusV1>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ObjectStatusV1 {
    target: ReferenceV1,
    metric_name: String,
    current_value: Quantity,
    #[serde(skip_serializing_if = "Option::is_none")]
    selector: Option<LabelSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    average_value: Option<Quantity>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct PodsStatusV1 {
    metric_name: String,
    current_average_value: Quantity,
    #[serde(skip_serializing_if = "Option::is_none")]
    selector: Option<LabelSelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ResourceStatusV1 {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_average_utilization: Option<i32>,
    current_average_value: Quantity,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ContainerResourceStatusV1 {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_average_utilization: Option<i32>,
    current_average_value: Quantity,
    container: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ExternalStatusV1 {
    metric_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    metric_selector: Option<LabelSelector>,
    current_value: Quantity,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_average_value: Option<Quantity>,
}

/// A Go quantity held by value: unset is zero.
fn or_zero(q: Option<&Quantity>) -> Quantity {
    q.cloned().unwrap_or_else(|| Quantity("0".into()))
}

fn is_zero(q: &Quantity) -> bool {
    q.0.is_empty()
        || quantity::Quantity::parse(&q.0).is_some_and(|q| !q.is_positive() && !q.is_negative())
}

/// A quantity read from a Go value field: empty (absent) is zero.
fn value_of(q: &Quantity) -> Quantity {
    if q.0.is_empty() {
        Quantity("0".into())
    } else {
        q.clone()
    }
}

fn reference_to_v1(r: &v2::CrossVersionObjectReference) -> ReferenceV1 {
    ReferenceV1 {
        kind: r.kind.clone(),
        name: r.name.clone(),
        api_version: r.api_version.clone().unwrap_or_default(),
    }
}

fn reference_to_v2(r: &ReferenceV1) -> v2::CrossVersionObjectReference {
    v2::CrossVersionObjectReference {
        kind: r.kind.clone(),
        name: r.name.clone(),
        api_version: Some(r.api_version.clone()).filter(|v| !v.is_empty()),
    }
}

fn identifier(name: &str, selector: &Option<LabelSelector>) -> v2::MetricIdentifier {
    v2::MetricIdentifier {
        name: name.to_string(),
        selector: selector.clone(),
    }
}

pub(super) fn metric_spec_to_v1(m: &v2::MetricSpec) -> MetricSpecV1 {
    MetricSpecV1 {
        type_: m.type_.clone(),
        object: m.object.as_ref().map(|o| ObjectSourceV1 {
            target: reference_to_v1(&o.described_object),
            metric_name: o.metric.name.clone(),
            target_value: or_zero(o.target.value.as_ref()),
            selector: o.metric.selector.clone(),
            average_value: o.target.average_value.clone(),
        }),
        pods: m.pods.as_ref().map(|p| PodsSourceV1 {
            metric_name: p.metric.name.clone(),
            target_average_value: or_zero(p.target.average_value.as_ref()),
            selector: p.metric.selector.clone(),
        }),
        resource: m.resource.as_ref().map(|r| ResourceSourceV1 {
            name: r.name.clone(),
            target_average_utilization: r.target.average_utilization,
            target_average_value: r.target.average_value.clone(),
        }),
        container_resource: m
            .container_resource
            .as_ref()
            .map(|r| ContainerResourceSourceV1 {
                name: r.name.clone(),
                target_average_utilization: r.target.average_utilization,
                target_average_value: r.target.average_value.clone(),
                container: r.container.clone(),
            }),
        external: m.external.as_ref().map(|e| ExternalSourceV1 {
            metric_name: e.metric.name.clone(),
            metric_selector: e.metric.selector.clone(),
            target_value: e.target.value.clone(),
            target_average_value: e.target.average_value.clone(),
        }),
    }
}

/// A Resource or ContainerResource target: a utilization, else an average value.
fn resource_target(utilization: Option<i32>, average: &Option<Quantity>) -> v2::MetricTarget {
    v2::MetricTarget {
        type_: if utilization.is_some() {
            "Utilization"
        } else {
            "AverageValue"
        }
        .into(),
        average_utilization: utilization,
        average_value: average.clone(),
        value: None,
    }
}

pub(super) fn metric_spec_to_v2(m: &MetricSpecV1) -> v2::MetricSpec {
    v2::MetricSpec {
        type_: m.type_.clone(),
        object: m.object.as_ref().map(|o| {
            // v1 always writes targetValue; a zero one beside an average value was never set
            // (upstream's fix for a round trip that failed validation).
            let value = match &o.average_value {
                None => Some(value_of(&o.target_value)),
                Some(_) => Some(o.target_value.clone()).filter(|v| !is_zero(v)),
            };
            v2::ObjectMetricSource {
                described_object: reference_to_v2(&o.target),
                metric: identifier(&o.metric_name, &o.selector),
                target: v2::MetricTarget {
                    type_: if o.average_value.is_none() {
                        "Value"
                    } else {
                        "AverageValue"
                    }
                    .into(),
                    value,
                    average_value: o.average_value.clone(),
                    average_utilization: None,
                },
            }
        }),
        pods: m.pods.as_ref().map(|p| v2::PodsMetricSource {
            metric: identifier(&p.metric_name, &p.selector),
            target: v2::MetricTarget {
                type_: "AverageValue".into(),
                average_value: Some(value_of(&p.target_average_value)),
                ..Default::default()
            },
        }),
        resource: m.resource.as_ref().map(|r| v2::ResourceMetricSource {
            name: r.name.clone(),
            target: resource_target(r.target_average_utilization, &r.target_average_value),
        }),
        container_resource: m.container_resource.as_ref().map(|r| {
            v2::ContainerResourceMetricSource {
                name: r.name.clone(),
                container: r.container.clone(),
                target: resource_target(r.target_average_utilization, &r.target_average_value),
            }
        }),
        external: m.external.as_ref().map(|e| v2::ExternalMetricSource {
            metric: identifier(&e.metric_name, &e.metric_selector),
            target: v2::MetricTarget {
                type_: if e.target_value.is_none() {
                    "AverageValue"
                } else {
                    "Value"
                }
                .into(),
                value: e.target_value.clone(),
                average_value: e.target_average_value.clone(),
                average_utilization: None,
            },
        }),
    }
}

pub(super) fn metric_status_to_v1(m: &v2::MetricStatus) -> MetricStatusV1 {
    MetricStatusV1 {
        type_: m.type_.clone(),
        object: m.object.as_ref().map(|o| ObjectStatusV1 {
            target: reference_to_v1(&o.described_object),
            metric_name: o.metric.name.clone(),
            current_value: or_zero(o.current.value.as_ref()),
            selector: o.metric.selector.clone(),
            average_value: o.current.average_value.clone(),
        }),
        pods: m.pods.as_ref().map(|p| PodsStatusV1 {
            metric_name: p.metric.name.clone(),
            current_average_value: or_zero(p.current.average_value.as_ref()),
            selector: p.metric.selector.clone(),
        }),
        resource: m.resource.as_ref().map(|r| ResourceStatusV1 {
            name: r.name.clone(),
            current_average_utilization: r.current.average_utilization,
            current_average_value: or_zero(r.current.average_value.as_ref()),
        }),
        container_resource: m
            .container_resource
            .as_ref()
            .map(|r| ContainerResourceStatusV1 {
                name: r.name.clone(),
                current_average_utilization: r.current.average_utilization,
                current_average_value: or_zero(r.current.average_value.as_ref()),
                container: r.container.clone(),
            }),
        external: m.external.as_ref().map(|e| ExternalStatusV1 {
            metric_name: e.metric.name.clone(),
            metric_selector: e.metric.selector.clone(),
            current_value: or_zero(e.current.value.as_ref()),
            current_average_value: e.current.average_value.clone(),
        }),
    }
}

pub(super) fn metric_status_to_v2(m: &MetricStatusV1) -> v2::MetricStatus {
    let average = |utilization: Option<i32>, value: &Quantity| v2::MetricValueStatus {
        average_utilization: utilization,
        average_value: Some(value_of(value)),
        value: None,
    };
    v2::MetricStatus {
        type_: m.type_.clone(),
        object: m.object.as_ref().map(|o| {
            // As for targets: a zero value beside an average value was never reported.
            let value = match &o.average_value {
                None => Some(value_of(&o.current_value)),
                Some(_) => Some(o.current_value.clone()).filter(|v| !is_zero(v)),
            };
            v2::ObjectMetricStatus {
                described_object: reference_to_v2(&o.target),
                metric: identifier(&o.metric_name, &o.selector),
                current: v2::MetricValueStatus {
                    value,
                    average_value: o.average_value.clone(),
                    average_utilization: None,
                },
            }
        }),
        pods: m.pods.as_ref().map(|p| v2::PodsMetricStatus {
            metric: identifier(&p.metric_name, &p.selector),
            current: average(None, &p.current_average_value),
        }),
        resource: m.resource.as_ref().map(|r| v2::ResourceMetricStatus {
            name: r.name.clone(),
            current: average(r.current_average_utilization, &r.current_average_value),
        }),
        container_resource: m.container_resource.as_ref().map(|r| {
            v2::ContainerResourceMetricStatus {
                name: r.name.clone(),
                container: r.container.clone(),
                current: average(r.current_average_utilization, &r.current_average_value),
            }
        }),
        external: m.external.as_ref().map(|e| v2::ExternalMetricStatus {
            metric: identifier(&e.metric_name, &e.metric_selector),
            current: v2::MetricValueStatus {
                value: Some(value_of(&e.current_value)),
                average_value: e.current_average_value.clone(),
                average_utilization: None,
            },
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// The behavior annotation: upstream marshals its internal type, which has no json tags, so
// keys are Go field names and nil pointers are null. Go reads keys ignoring case; the
// document is read with its keys lower-cased to the same effect.

#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct GoBehavior {
    #[serde(rename(serialize = "ScaleUp", deserialize = "scaleup"), default)]
    scale_up: Option<GoRules>,
    #[serde(rename(serialize = "ScaleDown", deserialize = "scaledown"), default)]
    scale_down: Option<GoRules>,
}

#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct GoRules {
    #[serde(
        rename(
            serialize = "StabilizationWindowSeconds",
            deserialize = "stabilizationwindowseconds"
        ),
        default
    )]
    stabilization_window_seconds: Option<i32>,
    #[serde(
        rename(serialize = "SelectPolicy", deserialize = "selectpolicy"),
        default
    )]
    select_policy: Option<String>,
    #[serde(rename(serialize = "Policies", deserialize = "policies"), default)]
    policies: Option<Vec<GoPolicy>>,
    #[serde(rename(serialize = "Tolerance", deserialize = "tolerance"), default)]
    tolerance: Option<Quantity>,
}

#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct GoPolicy {
    #[serde(rename(serialize = "Type", deserialize = "type"), default)]
    type_: String,
    #[serde(rename(serialize = "Value", deserialize = "value"), default)]
    value: i32,
    #[serde(
        rename(serialize = "PeriodSeconds", deserialize = "periodseconds"),
        default
    )]
    period_seconds: i32,
}

impl GoBehavior {
    /// The behavior an annotation holds; `None` when it does not decode or says nothing
    /// (upstream moves only well-formed data from the annotation to the field).
    pub(super) fn parse(raw: &str) -> Option<GoBehavior> {
        let mut doc: Value = serde_json::from_str(raw).ok()?;
        lower_case_keys(&mut doc);
        let behavior: GoBehavior = serde_json::from_value(doc).ok()?;
        (behavior != GoBehavior::default()).then_some(behavior)
    }
}

fn lower_case_keys(v: &mut Value) {
    match v {
        Value::Object(map) => {
            let entries = std::mem::take(map);
            for (k, mut child) in entries {
                lower_case_keys(&mut child);
                map.insert(k.to_lowercase(), child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(lower_case_keys),
        _ => {}
    }
}

impl From<&v2::HorizontalPodAutoscalerBehavior> for GoBehavior {
    fn from(b: &v2::HorizontalPodAutoscalerBehavior) -> Self {
        let rules = |r: &v2::HPAScalingRules| GoRules {
            stabilization_window_seconds: r.stabilization_window_seconds,
            select_policy: r.select_policy.clone(),
            policies: r.policies.as_ref().map(|ps| {
                ps.iter()
                    .map(|p| GoPolicy {
                        type_: p.type_.clone(),
                        value: p.value,
                        period_seconds: p.period_seconds,
                    })
                    .collect()
            }),
            tolerance: r.tolerance.clone(),
        };
        GoBehavior {
            scale_up: b.scale_up.as_ref().map(rules),
            scale_down: b.scale_down.as_ref().map(rules),
        }
    }
}

impl From<GoBehavior> for v2::HorizontalPodAutoscalerBehavior {
    fn from(b: GoBehavior) -> Self {
        let rules = |r: GoRules| v2::HPAScalingRules {
            stabilization_window_seconds: r.stabilization_window_seconds,
            select_policy: r.select_policy,
            policies: r.policies.map(|ps| {
                ps.into_iter()
                    .map(|p| v2::HPAScalingPolicy {
                        type_: p.type_,
                        value: p.value,
                        period_seconds: p.period_seconds,
                    })
                    .collect()
            }),
            tolerance: r.tolerance,
        };
        v2::HorizontalPodAutoscalerBehavior {
            scale_up: b.scale_up.map(rules),
            scale_down: b.scale_down.map(rules),
        }
    }
}
