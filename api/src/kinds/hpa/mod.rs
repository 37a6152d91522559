//! HorizontalPodAutoscalers, stored as autoscaling/v2 and also served as autoscaling/v1
//! (`v1`): upstream's defaults (a CPU target, scaling behaviour), validation
//! (`validation`) and printer. autoscaling/v1 objects take all of these rules through
//! conversion to v2, so both versions behave as one kind.

pub mod v1;
mod validation;

use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v2::MetricStatus;
use k8s_openapi::api::autoscaling::v2::{
    HPAScalingPolicy, HPAScalingRules, HorizontalPodAutoscaler, MetricSpec, MetricTarget,
    ResourceMetricSource,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;

use crate::spec_and_status;
use crate::strategy::Kind;
use crate::table::{AGE, Column, NAME, Row, age, canonical_quantity, name, num, string, text};
use crate::validation::{Errors, Path};

impl Kind for HorizontalPodAutoscaler {
    const COLUMNS: &'static [Column] = HPA_COLUMNS;

    spec_and_status!();

    fn default_fields(&mut self) {
        // What autoscaling/v1 carries in annotations is no part of the object (upstream's
        // conversion to the internal version drops them).
        v1::drop_round_trip_annotations(&mut self.metadata);
        let spec = self.spec.get_or_insert_with(Default::default);
        spec.min_replicas.get_or_insert(1);
        if spec.metrics.as_ref().is_none_or(|m| m.is_empty()) {
            spec.metrics = Some(vec![MetricSpec {
                type_: "Resource".into(),
                resource: Some(ResourceMetricSource {
                    name: "cpu".into(),
                    target: MetricTarget {
                        type_: "Utilization".into(),
                        average_utilization: Some(80),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            }]);
        }
        if let Some(b) = spec.behavior.as_mut() {
            let up = b.scale_up.get_or_insert_with(HPAScalingRules::default);
            up.stabilization_window_seconds.get_or_insert(0);
            up.select_policy.get_or_insert_with(|| "Max".into());
            up.policies.get_or_insert_with(|| {
                vec![
                    HPAScalingPolicy {
                        type_: "Pods".into(),
                        value: 4,
                        period_seconds: 15,
                    },
                    HPAScalingPolicy {
                        type_: "Percent".into(),
                        value: 100,
                        period_seconds: 15,
                    },
                ]
            });
            let down = b.scale_down.get_or_insert_with(HPAScalingRules::default);
            down.select_policy.get_or_insert_with(|| "Max".into());
            down.policies.get_or_insert_with(|| {
                vec![HPAScalingPolicy {
                    type_: "Percent".into(),
                    value: 100,
                    period_seconds: 15,
                }]
            });
        }
    }

    fn prepare_create(&mut self) {
        self.status = None;
    }

    fn validate(&self, errs: &mut Errors) {
        let spec = self.spec.clone().unwrap_or_default();
        validation::validate_spec(&spec, &Path::new("spec"), 1, errs);
    }

    /// The spec is validated when it changes: a status write (which keeps the spec) is
    /// validated as upstream's status strategy does, on the status alone, and an object
    /// stored under older rules stays writable. An object already scaling to zero may keep
    /// `minReplicas: 0`.
    fn validate_update(&self, old: &Self, errs: &mut Errors) {
        if self.spec != old.spec {
            let spec = self.spec.clone().unwrap_or_default();
            let old_min = old.spec.as_ref().and_then(|s| s.min_replicas);
            let lower_bound = if old_min == Some(0) { 0 } else { 1 };
            validation::validate_spec(&spec, &Path::new("spec"), lower_bound, errs);
        }
        validation::validate_status(&self.status.clone().unwrap_or_default(), errs);
    }

    fn row(&self, now: Timestamp) -> Row {
        Row::new(hpa_cells(self, now))
    }
}

// ---------------------------------------------------------------------------------------------
// Table printing (upstream's printers, pkg/printers/internalversion).

const HPA_COLUMNS: &[Column] = &[
    NAME,
    string("Reference", doc::HPA_SCALE_TARGET_REF),
    string("Targets", doc::HPA_METRICS),
    string("MinPods", doc::HPA_MIN_REPLICAS),
    string("MaxPods", doc::HPA_MAX_REPLICAS),
    string("Replicas", doc::HPA_CURRENT_REPLICAS),
    AGE,
];

fn hpa_cells(hpa: &HorizontalPodAutoscaler, now: Timestamp) -> Vec<Value> {
    let spec = hpa.spec.clone().unwrap_or_default();
    let status = hpa.status.clone().unwrap_or_default();
    let reference = format!(
        "{}/{}",
        spec.scale_target_ref.kind, spec.scale_target_ref.name
    );
    let targets = format_hpa_metrics(
        spec.metrics.as_deref().unwrap_or(&[]),
        status.current_metrics.as_deref().unwrap_or(&[]),
    );
    let min_pods = spec
        .min_replicas
        .map_or_else(|| "<unset>".to_string(), |m| m.to_string());
    vec![
        name(&hpa.metadata),
        text(reference),
        text(targets),
        text(min_pods),
        num(spec.max_replicas),
        num(status.current_replicas.unwrap_or(0)),
        age(&hpa.metadata, now),
    ]
}

/// Each metric as `current/target` (`cpu: 50%/80%`, `500m/1 (avg)`); the status at the same
/// index is the current value. At most two are listed, then `+ N more...`.
fn format_hpa_metrics(specs: &[MetricSpec], statuses: &[MetricStatus]) -> String {
    if specs.is_empty() {
        return "<none>".to_string();
    }
    const MAX: usize = 2;
    const UNKNOWN: &str = "<unknown>";
    let percent = |p: Option<i32>| p.map(|p| format!("{p}%"));
    let list: Vec<String> = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let status = statuses.get(i);
            match spec.type_.as_str() {
                "External" => {
                    let target = spec.external.as_ref().map(|e| &e.target);
                    let current = status.and_then(|s| s.external.as_ref()).map(|e| &e.current);
                    match target.and_then(|t| t.average_value.as_ref()) {
                        Some(avg) => {
                            let current = current
                                .and_then(|c| c.average_value.as_ref())
                                .map_or_else(|| UNKNOWN.to_string(), |q| canonical_quantity(&q.0));
                            format!("{current}/{} (avg)", canonical_quantity(&avg.0))
                        }
                        None => {
                            let current = current.map_or_else(
                                || UNKNOWN.to_string(),
                                |c| quantity(c.value.as_ref()),
                            );
                            format!(
                                "{current}/{}",
                                quantity(target.and_then(|t| t.value.as_ref()))
                            )
                        }
                    }
                }
                "Pods" => {
                    let current = status.and_then(|s| s.pods.as_ref()).map_or_else(
                        || UNKNOWN.to_string(),
                        |p| quantity(p.current.average_value.as_ref()),
                    );
                    let target = spec
                        .pods
                        .as_ref()
                        .and_then(|p| p.target.average_value.as_ref());
                    format!("{current}/{}", quantity(target))
                }
                "Object" => {
                    let target = spec.object.as_ref().map(|o| &o.target);
                    let current = status.and_then(|s| s.object.as_ref()).map(|o| &o.current);
                    match target.and_then(|t| t.average_value.as_ref()) {
                        Some(avg) => {
                            let current = current
                                .and_then(|c| c.average_value.as_ref())
                                .map_or_else(|| UNKNOWN.to_string(), |q| canonical_quantity(&q.0));
                            format!("{current}/{} (avg)", canonical_quantity(&avg.0))
                        }
                        None => {
                            let current = current.map_or_else(
                                || UNKNOWN.to_string(),
                                |c| quantity(c.value.as_ref()),
                            );
                            format!(
                                "{current}/{}",
                                quantity(target.and_then(|t| t.value.as_ref()))
                            )
                        }
                    }
                }
                "Resource" | "ContainerResource" => {
                    let (resource, target, current) = if spec.type_ == "Resource" {
                        let source = spec.resource.as_ref();
                        (
                            source.map_or("", |r| r.name.as_str()),
                            source.map(|r| &r.target),
                            status.and_then(|s| s.resource.as_ref()).map(|r| &r.current),
                        )
                    } else {
                        let source = spec.container_resource.as_ref();
                        (
                            source.map_or("", |r| r.name.as_str()),
                            source.map(|r| &r.target),
                            status
                                .and_then(|s| s.container_resource.as_ref())
                                .map(|r| &r.current),
                        )
                    };
                    match target.and_then(|t| t.average_value.as_ref()) {
                        Some(avg) => {
                            let current = current.map_or_else(
                                || UNKNOWN.to_string(),
                                |c| quantity(c.average_value.as_ref()),
                            );
                            format!("{resource}: {current}/{}", canonical_quantity(&avg.0))
                        }
                        None => {
                            let current = current
                                .and_then(|c| percent(c.average_utilization))
                                .unwrap_or_else(|| UNKNOWN.to_string());
                            let target = target
                                .and_then(|t| percent(t.average_utilization))
                                .unwrap_or_else(|| "<auto>".to_string());
                            format!("{resource}: {current}/{target}")
                        }
                    }
                }
                _ => "<unknown type>".to_string(),
            }
        })
        .collect();
    let count = list.len();
    if count > MAX {
        format!("{} + {} more...", list[..MAX].join(", "), count - MAX)
    } else {
        list.join(", ")
    }
}

/// A quantity as `Quantity.String()` prints it: canonical, `<nil>` when absent.
fn quantity(q: Option<&Quantity>) -> String {
    q.map_or_else(|| "<nil>".to_string(), |q| canonical_quantity(&q.0))
}

mod doc {
    pub const HPA_SCALE_TARGET_REF: &str = "scaleTargetRef points to the target resource to scale, and is used to the pods for which metrics should be collected, as well as to actually change the replica count.";
    pub const HPA_METRICS: &str = "metrics contains the specifications for which to use to calculate the desired replica count (the maximum replica count across all metrics will be used).  The desired replica count is calculated multiplying the ratio between the target value and the current value by the current number of pods.  Ergo, metrics used must decrease as the pod count is increased, and vice-versa.  See the individual metric source types for more information about how each type of metric must respond.";
    pub const HPA_MIN_REPLICAS: &str = "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.  It defaults to 1 pod.  minReplicas is allowed to be 0 if the alpha feature gate HPAScaleToZero is enabled and at least one Object or External metric is configured.  Scaling is active as long as at least one metric value is available.";
    pub const HPA_MAX_REPLICAS: &str = "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up. It cannot be less that minReplicas.";
    pub const HPA_CURRENT_REPLICAS: &str = "currentReplicas is current number of replicas of pods managed by this autoscaler, as last seen by the autoscaler.";
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::table::testing::*;

    #[test]
    fn hpa_targets() {
        let hpa = |metrics: Value, current: Value| {
            row_of::<HorizontalPodAutoscaler>(
                json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                       "metadata": {"name": "some-hpa"},
                       "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"},
                                "minReplicas": 2, "maxReplicas": 10, "metrics": metrics},
                       "status": {"currentReplicas": 4, "desiredReplicas": 5, "currentMetrics": current}}),
            )
        };
        let cpu_util = json!({"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 80}}});
        let cpu_now = json!({"type": "Resource", "resource": {"name": "cpu",
            "current": {"averageUtilization": 50, "averageValue": "40m"}}});
        assert_eq!(
            hpa(json!([cpu_util]), json!([cpu_now])),
            vec![
                json!("some-hpa"),
                json!("Deployment/web"),
                json!("cpu: 50%/80%"),
                json!("2"),
                json!(10),
                json!(4),
                json!("<unknown>")
            ]
        );
        let targets = |metrics: Value, current: Value| hpa(metrics, current)[2].clone();
        assert_eq!(targets(json!([cpu_util]), json!([])), "cpu: <unknown>/80%");
        assert_eq!(targets(json!([]), json!([])), "<none>");
        let mem_avg = json!({"type": "Resource", "resource": {"name": "memory",
            "target": {"type": "AverageValue", "averageValue": "1024Mi"}}});
        let mem_now = json!({"type": "Resource", "resource": {"name": "memory", "current": {"averageValue": "500Mi"}}});
        assert_eq!(
            targets(json!([mem_avg]), json!([mem_now])),
            "memory: 500Mi/1Gi"
        );
        let pods = json!({"type": "Pods", "pods": {"metric": {"name": "rps"},
            "target": {"type": "AverageValue", "averageValue": "100m"}}});
        let pods_now = json!({"type": "Pods", "pods": {"metric": {"name": "rps"}, "current": {"averageValue": "0.05"}}});
        assert_eq!(targets(json!([pods]), json!([pods_now])), "50m/100m");
        let ext_avg = json!({"type": "External", "external": {"metric": {"name": "q"},
            "target": {"type": "AverageValue", "averageValue": "100m"}}});
        assert_eq!(targets(json!([ext_avg]), json!([])), "<unknown>/100m (avg)");
        let obj = json!({"type": "Object", "object": {"metric": {"name": "q"},
            "describedObject": {"kind": "Service", "name": "s"},
            "target": {"type": "Value", "value": "100m"}}});
        let obj_now = json!({"type": "Object", "object": {"metric": {"name": "q"},
            "describedObject": {"kind": "Service", "name": "s"}, "current": {"value": "50m"}}});
        assert_eq!(targets(json!([obj]), json!([obj_now])), "50m/100m");
        let container = json!({"type": "ContainerResource", "containerResource": {"name": "cpu", "container": "app",
            "target": {"type": "Utilization"}}});
        assert_eq!(
            targets(json!([container]), json!([])),
            "cpu: <unknown>/<auto>"
        );
        assert_eq!(
            targets(json!([cpu_util, mem_avg, pods, obj]), json!([cpu_now])),
            "cpu: 50%/80%, memory: <unknown>/1Gi + 2 more..."
        );
        let unset = row_of::<HorizontalPodAutoscaler>(
            json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
                   "spec": {"scaleTargetRef": {"kind": "ReplicationController", "name": "some-rc"}, "maxReplicas": 10},
                   "status": {"desiredReplicas": 0}}),
        );
        assert_eq!(
            unset[2..6],
            [json!("<none>"), json!("<unset>"), json!(10), json!(0)]
        );
    }
}
