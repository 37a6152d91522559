//! autoscaling/v1 HorizontalPodAutoscalers: a view of the autoscaling/v2 objects, converted as
//! upstream's `pkg/apis/autoscaling/v1/conversion.go` does. v1 says only
//! `targetCPUUtilizationPercentage` and `currentCPUUtilizationPercentage`; what else v2 holds
//! (other metrics, current metrics, behavior, conditions) travels in annotations, so that a
//! v1 client that reads an object and writes it back loses nothing.
//!
//! The annotations hold upstream's formats (`annotations`): metrics and current metrics in
//! autoscaling/v1's Go types (`metricName`, `targetAverageValue`), conditions as v2 has them,
//! and the behavior as upstream marshals its internal Go type (`ScaleUp`).

mod annotations;

use std::collections::BTreeMap;

use k8s_openapi::api::autoscaling::v1::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec,
    HorizontalPodAutoscalerStatus,
};
use k8s_openapi::api::autoscaling::v2;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;

use self::annotations::{
    GoBehavior, MetricSpecV1, MetricStatusV1, metric_spec_to_v1, metric_spec_to_v2,
    metric_status_to_v1, metric_status_to_v2,
};
use crate::conversion::Convertible;
use crate::validation::{FieldError, Path};

/// The metrics v1 cannot express, in autoscaling/v1's `MetricSpec` form.
pub const METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
/// `status.currentMetrics`, in autoscaling/v1's `MetricStatus` form.
pub const CURRENT_METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
/// `status.conditions`.
pub const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
/// `spec.behavior`, as upstream marshals its internal type.
pub const BEHAVIOR_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";
/// Written by upstream's autoscaling/v2beta2 view; dropped with the others.
const TOLERANCE_ANNOTATIONS: [&str; 2] = [
    "autoscaling.alpha.kubernetes.io/scale-down-tolerance",
    "autoscaling.alpha.kubernetes.io/scale-up-tolerance",
];
/// The target v1 clients got before v2 made it explicit.
const DEFAULT_CPU_UTILIZATION: i32 = 80;

/// Upstream's `DropRoundTripHorizontalPodAutoscalerAnnotations`.
pub fn drop_round_trip_annotations(meta: &mut ObjectMeta) {
    let Some(annotations) = meta.annotations.as_mut() else {
        return;
    };
    for key in [
        METRICS_ANNOTATION,
        CURRENT_METRICS_ANNOTATION,
        CONDITIONS_ANNOTATION,
        BEHAVIOR_ANNOTATION,
    ]
    .into_iter()
    .chain(TOLERANCE_ANNOTATIONS)
    {
        annotations.remove(key);
    }
    if annotations.is_empty() {
        meta.annotations = None;
    }
}

impl Convertible for HorizontalPodAutoscaler {
    type Hub = v2::HorizontalPodAutoscaler;

    /// autoscaling/v1's `SetDefaults_HorizontalPodAutoscaler`.
    fn default_fields(&mut self) {
        let spec = self.spec.get_or_insert_with(Default::default);
        spec.min_replicas.get_or_insert(1);
    }

    fn from_hub(hub: &v2::HorizontalPodAutoscaler) -> Self {
        to_v1(hub)
    }

    fn to_hub(&self) -> Result<v2::HorizontalPodAutoscaler, FieldError> {
        to_v2(self)
    }
}

/// `Convert_autoscaling_HorizontalPodAutoscaler_To_v1_HorizontalPodAutoscaler`.
pub fn to_v1(hub: &v2::HorizontalPodAutoscaler) -> HorizontalPodAutoscaler {
    let spec = hub.spec.clone().unwrap_or_default();
    let status = hub.status.clone().unwrap_or_default();
    let metrics = spec.metrics.unwrap_or_default();
    let current_metrics = status.current_metrics.unwrap_or_default();
    let conditions = status.conditions.unwrap_or_default();

    let mut metadata = hub.metadata.clone();
    drop_round_trip_annotations(&mut metadata);
    let mut annotations = BTreeMap::new();
    let other_metrics: Vec<MetricSpecV1> = metrics
        .iter()
        .filter(|m| cpu_utilization(m).is_none())
        .map(metric_spec_to_v1)
        .collect();
    if !other_metrics.is_empty() {
        annotations.insert(METRICS_ANNOTATION, json_text(&other_metrics));
    }
    if !current_metrics.is_empty() {
        let v1: Vec<MetricStatusV1> = current_metrics.iter().map(metric_status_to_v1).collect();
        annotations.insert(CURRENT_METRICS_ANNOTATION, json_text(&v1));
    }
    if !conditions.is_empty() {
        annotations.insert(CONDITIONS_ANNOTATION, json_text(&conditions));
    }
    if let Some(behavior) = &spec.behavior {
        annotations.insert(BEHAVIOR_ANNOTATION, json_text(&GoBehavior::from(behavior)));
    }
    if !annotations.is_empty() {
        let all = metadata.annotations.get_or_insert_with(Default::default);
        all.extend(annotations.into_iter().map(|(k, v)| (k.to_string(), v)));
    }

    // The first CPU utilization is the target: the one left out of the annotation.
    let target_cpu = metrics.iter().find_map(cpu_utilization);
    // The last CPU utilization reported is the current one.
    let current_cpu = current_metrics
        .iter()
        .filter_map(|m| m.resource.as_ref().filter(|r| is_cpu(&m.type_, &r.name)))
        .filter_map(|r| r.current.average_utilization)
        .next_back();
    let target = spec.scale_target_ref;
    HorizontalPodAutoscaler {
        metadata,
        spec: Some(HorizontalPodAutoscalerSpec {
            max_replicas: spec.max_replicas,
            min_replicas: spec.min_replicas,
            scale_target_ref: CrossVersionObjectReference {
                api_version: target.api_version,
                kind: target.kind,
                name: target.name,
            },
            target_cpu_utilization_percentage: target_cpu,
        }),
        status: Some(HorizontalPodAutoscalerStatus {
            current_cpu_utilization_percentage: current_cpu,
            current_replicas: status.current_replicas.unwrap_or(0),
            desired_replicas: status.desired_replicas,
            last_scale_time: status.last_scale_time,
            observed_generation: status.observed_generation,
        }),
    }
}

/// `Convert_v1_HorizontalPodAutoscaler_To_autoscaling_HorizontalPodAutoscaler`: fails on
/// a metrics, current metrics or conditions annotation that does not decode (a malformed
/// behavior is ignored, as upstream ignores it).
pub fn to_v2(hpa: &HorizontalPodAutoscaler) -> Result<v2::HorizontalPodAutoscaler, FieldError> {
    let spec = hpa.spec.clone().unwrap_or_default();
    let status = hpa.status.clone().unwrap_or_default();
    let annotations = hpa.metadata.annotations.clone().unwrap_or_default();

    let mut metrics: Vec<v2::MetricSpec> = spec
        .target_cpu_utilization_percentage
        .map(cpu_metric)
        .into_iter()
        .collect();
    if let Some(other) = annotation::<Vec<MetricSpecV1>>(&annotations, METRICS_ANNOTATION)? {
        // Those come first; the CPU target goes last.
        let mut all: Vec<v2::MetricSpec> = other.iter().map(metric_spec_to_v2).collect();
        all.append(&mut metrics);
        metrics = all;
    }
    if metrics.is_empty() {
        metrics.push(cpu_metric(DEFAULT_CPU_UTILIZATION));
    }
    let mut current_metrics = status.current_cpu_utilization_percentage.map(|u| {
        vec![v2::MetricStatus {
            type_: "Resource".into(),
            resource: Some(v2::ResourceMetricStatus {
                name: "cpu".into(),
                current: v2::MetricValueStatus {
                    average_utilization: Some(u),
                    ..Default::default()
                },
            }),
            ..Default::default()
        }]
    });
    // These say more than currentCPUUtilizationPercentage: they win.
    if let Some(current) =
        annotation::<Vec<MetricStatusV1>>(&annotations, CURRENT_METRICS_ANNOTATION)?
    {
        current_metrics = Some(current.iter().map(metric_status_to_v2).collect());
    }
    let conditions = annotation::<Vec<v2::HorizontalPodAutoscalerCondition>>(
        &annotations,
        CONDITIONS_ANNOTATION,
    )?;
    let behavior = annotations
        .get(BEHAVIOR_ANNOTATION)
        .and_then(|raw| GoBehavior::parse(raw))
        .map(v2::HorizontalPodAutoscalerBehavior::from);

    let mut metadata = hpa.metadata.clone();
    drop_round_trip_annotations(&mut metadata);
    let target = spec.scale_target_ref;
    Ok(v2::HorizontalPodAutoscaler {
        metadata,
        spec: Some(v2::HorizontalPodAutoscalerSpec {
            behavior,
            max_replicas: spec.max_replicas,
            metrics: Some(metrics),
            min_replicas: spec.min_replicas,
            scale_target_ref: v2::CrossVersionObjectReference {
                api_version: target.api_version,
                kind: target.kind,
                name: target.name,
            },
        }),
        status: Some(v2::HorizontalPodAutoscalerStatus {
            conditions,
            current_metrics,
            // v2's is optional and omitted at zero, as Go omits it.
            current_replicas: Some(status.current_replicas).filter(|r| *r != 0),
            desired_replicas: status.desired_replicas,
            last_scale_time: status.last_scale_time,
            observed_generation: status.observed_generation,
        }),
    })
}

/// The annotation `key` decoded, if present; a 422 cause at the annotation when it does not
/// decode.
fn annotation<T: DeserializeOwned>(
    annotations: &BTreeMap<String, String>,
    key: &str,
) -> Result<Option<T>, FieldError> {
    let Some(raw) = annotations.get(key) else {
        return Ok(None);
    };
    serde_json::from_str(raw).map(Some).map_err(|e| {
        FieldError::invalid(
            &Path::new("metadata").child("annotations").key(key),
            raw,
            format!("does not decode: {e}"),
        )
    })
}

fn json_text<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("annotation types serialize")
}

fn is_cpu(type_: &str, resource: &str) -> bool {
    type_ == "Resource" && resource == "cpu"
}

/// The utilization target of a CPU Resource metric: what `targetCPUUtilizationPercentage`
/// stands for.
fn cpu_utilization(m: &v2::MetricSpec) -> Option<i32> {
    let r = m.resource.as_ref().filter(|r| is_cpu(&m.type_, &r.name))?;
    r.target.average_utilization
}

fn cpu_metric(utilization: i32) -> v2::MetricSpec {
    v2::MetricSpec {
        type_: "Resource".into(),
        resource: Some(v2::ResourceMetricSource {
            name: "cpu".into(),
            target: v2::MetricTarget {
                type_: "Utilization".into(),
                average_utilization: Some(utilization),
                ..Default::default()
            },
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
