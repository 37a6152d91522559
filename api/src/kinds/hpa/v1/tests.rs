use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler as HpaV1;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler as HpaV2;
use serde_json::{Value, json};

use super::*;
use crate::conversion::Converted;
use crate::registry::built_in;
use crate::strategy::Strategy;

fn v2(value: Value) -> HpaV2 {
    serde_json::from_value(value).unwrap()
}

fn v1(value: Value) -> HpaV1 {
    serde_json::from_value(value).unwrap()
}

fn annotations(hpa: &HpaV1) -> BTreeMap<String, String> {
    hpa.metadata.annotations.clone().unwrap_or_default()
}

fn annotation_json(hpa: &HpaV1, key: &str) -> Value {
    serde_json::from_str(&annotations(hpa)[key]).unwrap()
}

/// A v2 object with every metric source, a behavior and a full status, as stored.
fn everything() -> HpaV2 {
    v2(json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "default", "annotations": {"team": "a"}},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 2, "maxReplicas": 10,
            "metrics": [
                {"type": "Resource", "resource": {"name": "memory",
                    "target": {"type": "Utilization", "averageUtilization": 70}}},
                {"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "AverageValue", "averageValue": "500m"}}},
                {"type": "Pods", "pods": {"metric": {"name": "rps",
                    "selector": {"matchLabels": {"a": "b"}}},
                    "target": {"type": "AverageValue", "averageValue": "1k"}}},
                {"type": "Object", "object": {"metric": {"name": "hits"},
                    "describedObject": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": "main"},
                    "target": {"type": "Value", "value": "2k"}}},
                {"type": "Object", "object": {"metric": {"name": "hits-avg"},
                    "describedObject": {"kind": "Service", "name": "main"},
                    "target": {"type": "AverageValue", "averageValue": "100"}}},
                {"type": "External", "external": {"metric": {"name": "queue"},
                    "target": {"type": "AverageValue", "averageValue": "30"}}},
                {"type": "External", "external": {"metric": {"name": "lag"},
                    "target": {"type": "Value", "value": "5"}}},
                {"type": "ContainerResource", "containerResource": {"name": "cpu", "container": "app",
                    "target": {"type": "Utilization", "averageUtilization": 60}}},
                {"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 75}}}
            ],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                                 {"type": "Percent", "value": 100, "periodSeconds": 15}]},
                "scaleDown": {"stabilizationWindowSeconds": 300, "selectPolicy": "Disabled",
                    "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}]}
            }
        },
        "status": {
            "observedGeneration": 3, "lastScaleTime": "2025-01-01T00:00:00Z",
            "currentReplicas": 4, "desiredReplicas": 5,
            "currentMetrics": [
                {"type": "Resource", "resource": {"name": "cpu",
                    "current": {"averageUtilization": 50, "averageValue": "250m"}}},
                {"type": "Pods", "pods": {"metric": {"name": "rps"}, "current": {"averageValue": "123"}}},
                {"type": "External", "external": {"metric": {"name": "lag"}, "current": {"value": "42"}}},
                {"type": "Object", "object": {"metric": {"name": "hits-avg"},
                    "describedObject": {"kind": "Service", "name": "main"}, "current": {"averageValue": "0"}}},
                {"type": "ContainerResource", "containerResource": {"name": "memory", "container": "app",
                    "current": {"averageValue": "256Mi"}}}
            ],
            "conditions": [
                {"type": "AbleToScale", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z",
                 "reason": "ReadyForNewScale", "message": "recommended size matches current size"},
                {"type": "ScalingActive", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z",
                 "reason": "ValidMetricFound", "message": "ok"}
            ]
        }
    }))
}

#[test]
fn cpu_utilization_is_the_v1_target_and_the_rest_goes_to_annotations() {
    let hub = everything();
    let view = to_v1(&hub);
    let spec = view.spec.clone().unwrap();
    assert_eq!(spec.target_cpu_utilization_percentage, Some(75));
    assert_eq!((spec.min_replicas, spec.max_replicas), (Some(2), 10));
    assert_eq!(spec.scale_target_ref.kind, "Deployment");
    let status = view.status.clone().unwrap();
    assert_eq!(status.current_cpu_utilization_percentage, Some(50));
    assert_eq!((status.current_replicas, status.desired_replicas), (4, 5));
    assert_eq!(status.observed_generation, Some(3));

    let all = annotations(&view);
    assert_eq!(all["team"], "a");
    let metrics = annotation_json(&view, METRICS_ANNOTATION);
    // Every metric but the CPU utilization one, in v1's form.
    assert_eq!(metrics.as_array().unwrap().len(), 8);
    assert_eq!(
        metrics[0],
        json!({"type": "Resource", "resource": {"name": "memory", "targetAverageUtilization": 70}})
    );
    assert_eq!(
        metrics[2],
        json!({"type": "Pods", "pods": {"metricName": "rps", "targetAverageValue": "1k",
               "selector": {"matchLabels": {"a": "b"}}}})
    );
    assert_eq!(
        metrics[4],
        json!({"type": "Object", "object": {"target": {"kind": "Service", "name": "main"},
               "metricName": "hits-avg", "targetValue": "0", "averageValue": "100"}})
    );
    assert_eq!(
        metrics[5],
        json!({"type": "External", "external": {"metricName": "queue", "targetAverageValue": "30"}})
    );
    assert_eq!(
        metrics[7],
        json!({"type": "ContainerResource", "containerResource": {"name": "cpu",
               "targetAverageUtilization": 60, "container": "app"}})
    );
    let current = annotation_json(&view, CURRENT_METRICS_ANNOTATION);
    assert_eq!(
        current[0],
        json!({"type": "Resource", "resource": {"name": "cpu",
               "currentAverageUtilization": 50, "currentAverageValue": "250m"}})
    );
    assert_eq!(
        current[2],
        json!({"type": "External", "external": {"metricName": "lag", "currentValue": "42"}})
    );
    assert_eq!(
        annotation_json(&view, CONDITIONS_ANNOTATION)[1]["reason"],
        "ValidMetricFound"
    );
    // The behavior as upstream marshals its internal type.
    assert_eq!(
        annotation_json(&view, BEHAVIOR_ANNOTATION),
        json!({
            "ScaleUp": {"StabilizationWindowSeconds": 0, "SelectPolicy": "Max",
                "Policies": [{"Type": "Pods", "Value": 4, "PeriodSeconds": 15},
                             {"Type": "Percent", "Value": 100, "PeriodSeconds": 15}],
                "Tolerance": null},
            "ScaleDown": {"StabilizationWindowSeconds": 300, "SelectPolicy": "Disabled",
                "Policies": [{"Type": "Percent", "Value": 10, "PeriodSeconds": 60}],
                "Tolerance": null}
        })
    );
}

#[test]
fn round_trip_through_v1_keeps_everything() {
    let hub = everything();
    let back = to_v2(&to_v1(&hub)).unwrap();
    // Upstream's one change: the CPU utilization metric comes back last, where it is here.
    assert_eq!(back, hub);
    // And through JSON, as a client would send it back.
    let sent: HpaV1 = serde_json::from_value(serde_json::to_value(to_v1(&hub)).unwrap()).unwrap();
    assert_eq!(to_v2(&sent).unwrap(), hub);
    assert_eq!(to_v1(&back), to_v1(&hub));
}

#[test]
fn the_cpu_metric_moves_to_the_end() {
    let mut hub = everything();
    let metrics = hub.spec.as_mut().unwrap().metrics.as_mut().unwrap();
    let cpu = metrics.pop().unwrap();
    metrics.insert(0, cpu.clone());
    let back = to_v2(&to_v1(&hub)).unwrap();
    let back_metrics = back.spec.unwrap().metrics.unwrap();
    assert_eq!(back_metrics.last(), Some(&cpu));
    assert_eq!(back_metrics.len(), 9);
}

#[test]
fn status_round_trip() {
    let mut hub = everything();
    hub.spec.as_mut().unwrap().metrics = Some(vec![cpu_metric(50)]);
    let view = to_v1(&hub);
    assert!(!annotations(&view).contains_key(METRICS_ANNOTATION));
    let back = to_v2(&view).unwrap();
    assert_eq!(back.status, hub.status);
    // A zero current replica count is v2's omitted one.
    let mut idle = everything();
    idle.status.as_mut().unwrap().current_replicas = None;
    assert_eq!(to_v1(&idle).status.unwrap().current_replicas, 0);
    assert_eq!(to_v2(&to_v1(&idle)).unwrap().status, idle.status);
}

#[test]
fn v1_written_objects_convert_to_v2() {
    let hpa = v1(json!({
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "maxReplicas": 5, "targetCPUUtilizationPercentage": 60},
        "status": {"currentReplicas": 1, "desiredReplicas": 2, "currentCPUUtilizationPercentage": 40}
    }));
    let hub = to_v2(&hpa).unwrap();
    let hub = serde_json::to_value(&hub).unwrap();
    assert_eq!(
        hub["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 60}}}])
    );
    assert_eq!(
        hub["status"]["currentMetrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 40}}}])
    );
    assert!(hub["metadata"].get("annotations").is_none());

    // No target at all is v1's implicit 80%.
    let mut bare = hpa.clone();
    bare.spec
        .as_mut()
        .unwrap()
        .target_cpu_utilization_percentage = None;
    let hub = to_v2(&bare).unwrap();
    assert_eq!(
        hub.spec.unwrap().metrics.unwrap(),
        vec![cpu_metric(DEFAULT_CPU_UTILIZATION)]
    );
}

#[test]
fn annotations_are_read_back_and_removed() {
    let hpa = v1(json!({
        "metadata": {"name": "web", "annotations": {
            "keep": "me",
            METRICS_ANNOTATION: r#"[{"type":"Pods","pods":{"metricName":"rps","targetAverageValue":"10"}},
                                   {"type":"Object","object":{"target":{"kind":"Service","name":"s"},"metricName":"q","targetValue":"0","averageValue":"5"}}]"#,
            CURRENT_METRICS_ANNOTATION: r#"[{"type":"Resource","resource":{"name":"cpu","currentAverageUtilization":70,"currentAverageValue":"700m"}}]"#,
            CONDITIONS_ANNOTATION: r#"[{"type":"AbleToScale","status":"False","reason":"BackoffBoth"}]"#,
            // Go field names in any case, as Go reads them.
            BEHAVIOR_ANNOTATION: r#"{"scaleDown":{"stabilizationWindowSeconds":60,"POLICIES":[{"type":"Pods","value":1,"periodSeconds":30}]}}"#,
        }},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5,
                 "targetCPUUtilizationPercentage": 60},
        "status": {"currentReplicas": 1, "desiredReplicas": 2, "currentCPUUtilizationPercentage": 10}
    }));
    let hub = serde_json::to_value(to_v2(&hpa).unwrap()).unwrap();
    assert_eq!(hub["metadata"]["annotations"], json!({"keep": "me"}));
    let metrics = &hub["spec"]["metrics"];
    assert_eq!(
        metrics[0],
        json!({"type": "Pods", "pods": {"metric": {"name": "rps"},
               "target": {"type": "AverageValue", "averageValue": "10"}}})
    );
    // A zero targetValue beside an average value was never set.
    assert_eq!(
        metrics[1]["object"]["target"],
        json!({"type": "AverageValue", "averageValue": "5"})
    );
    assert_eq!(metrics[2]["resource"]["target"]["averageUtilization"], 60);
    // The annotation's current metrics win over currentCPUUtilizationPercentage.
    assert_eq!(
        hub["status"]["currentMetrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
                "current": {"averageUtilization": 70, "averageValue": "700m"}}}])
    );
    assert_eq!(hub["status"]["conditions"][0]["reason"], "BackoffBoth");
    assert_eq!(
        hub["spec"]["behavior"],
        json!({"scaleDown": {"stabilizationWindowSeconds": 60,
               "policies": [{"type": "Pods", "value": 1, "periodSeconds": 30}]}})
    );
}

#[test]
fn malformed_annotations() {
    let with = |key: &str, value: &str| {
        v1(
            json!({"metadata": {"name": "web", "annotations": {key: value}},
                  "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 1}}),
        )
    };
    let err = to_v2(&with(METRICS_ANNOTATION, "not json")).unwrap_err();
    assert_eq!(
        err.field,
        "metadata.annotations[autoscaling.alpha.kubernetes.io/metrics]"
    );
    assert!(to_v2(&with(CONDITIONS_ANNOTATION, "{}")).is_err());
    // A behavior that does not decode, or says nothing, is ignored.
    for behavior in ["nonsense", "{}", r#"{"ScaleUp": null}"#] {
        let hub = to_v2(&with(BEHAVIOR_ANNOTATION, behavior)).unwrap();
        assert_eq!(hub.spec.unwrap().behavior, None, "{behavior}");
        assert_eq!(hub.metadata.annotations, None);
    }
}

fn strategy() -> Converted<HpaV1> {
    let info = built_in()
        .into_iter()
        .find(|r| r.group == "autoscaling" && r.version == "v1" && r.plural.starts_with("horiz"))
        .unwrap();
    Converted::new(info)
}

#[test]
fn the_v1_strategy_is_the_v2_one() {
    let s = strategy();
    let mut hpa = v1(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3,
                 "targetCPUUtilizationPercentage": 0}
    }));
    s.default_fields(&mut hpa);
    assert_eq!(hpa.spec.as_ref().unwrap().min_replicas, Some(1));
    let errs = s.validate(&hpa);
    let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        vec!["spec.metrics[0].resource.target.averageUtilization"]
    );
    assert_eq!(errs[0].detail, "must be greater than 0");

    // Stored as v2, read back as v1.
    hpa.spec.as_mut().unwrap().target_cpu_utilization_percentage = Some(50);
    let bytes = s.encode_stored(&hpa).unwrap();
    let stored: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        stored["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        50
    );
    assert_eq!(s.decode_stored(&bytes).unwrap(), hpa);

    // A status write keeps the spec and the annotations, and takes the new status.
    let mut hub = everything();
    hub.metadata.annotations = Some([("team".to_string(), "a".to_string())].into());
    let old = to_v1(&hub);
    let mut new = old.clone();
    new.metadata.annotations = Some([("team".to_string(), "b".to_string())].into());
    new.spec.as_mut().unwrap().max_replicas = 99;
    new.status.as_mut().unwrap().desired_replicas = 7;
    s.keep_spec(&mut new, &old);
    let new_hub = new.to_hub().unwrap();
    assert_eq!(new_hub.spec, hub.spec);
    assert_eq!(new_hub.metadata.annotations, hub.metadata.annotations);
    assert_eq!(new_hub.status.unwrap().desired_replicas, 7);

    // An update keeps the stored status, conditions included.
    let mut new = old.clone();
    new.metadata.annotations = None;
    new.status = None;
    s.keep_status(&mut new, &old);
    assert_eq!(new.to_hub().unwrap().status, hub.status);

    // Printed as v2 prints.
    let row = s
        .table_row(
            &serde_json::to_value(&old).unwrap(),
            jiff::Timestamp::UNIX_EPOCH,
        )
        .unwrap();
    assert_eq!(row.cells[1], json!("Deployment/web"));
    assert_eq!(
        s.table_columns().len(),
        crate::table::columns::<HpaV2>().len()
    );
}
