//! HorizontalPodAutoscalers at autoscaling/v1 and autoscaling/v2: one stored object seen
//! through both versions, whatever version wrote it, with one resourceVersion and one watch
//! history; and upstream's validation, with its field paths, whichever version a bad object
//! comes through.

use http::{Method, StatusCode};
use serde_json::{Value, json};
use testkit::{Backend, InProcess};

const V1: &str = "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers";
const V2: &str = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers";
const MERGE: &str = "application/merge-patch+json";

async fn server() -> InProcess {
    InProcess::start(Backend::Sqlite).await.unwrap()
}

fn v1_hpa(name: &str, target_cpu: i64) -> Value {
    json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": name},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "maxReplicas": 5, "targetCPUUtilizationPercentage": target_cpu}})
}

fn annotation(obj: &Value, key: &str) -> Value {
    let raw = obj["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in {obj}"));
    serde_json::from_str(raw).unwrap()
}

fn cpu_target(utilization: i64) -> Value {
    json!({"type": "Resource", "resource": {"name": "cpu",
           "target": {"type": "Utilization", "averageUtilization": utilization}}})
}

/// The causes of a 422, as `field: message`.
fn causes(reply: &testkit::Reply) -> Vec<String> {
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    reply.json()["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{}: {}",
                c["field"].as_str().unwrap(),
                c["message"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn served_at_both_versions() {
    let s = server().await;
    let group = s.get("/apis/autoscaling").await.json();
    assert_eq!(
        group["versions"],
        json!([{"groupVersion": "autoscaling/v2", "version": "v2"},
               {"groupVersion": "autoscaling/v1", "version": "v1"}])
    );
    assert_eq!(group["preferredVersion"]["version"], "v2");
    let v1 = s.get("/apis/autoscaling/v1").await.json();
    let names: Vec<&str> = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec![
            "horizontalpodautoscalers",
            "horizontalpodautoscalers/status"
        ]
    );
    assert_eq!(v1["resources"][0]["shortNames"], json!(["hpa"]));

    let index = s.get("/openapi/v3").await.json();
    let url = index["paths"]["apis/autoscaling/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let doc = s.get(&url).await.json();
    let schema = &doc["components"]["schemas"]["io.k8s.api.autoscaling.v1.HorizontalPodAutoscaler"];
    assert_eq!(
        schema["x-kubernetes-group-version-kind"],
        json!([{"group": "autoscaling", "kind": "HorizontalPodAutoscaler", "version": "v1"}])
    );
    assert!(doc["paths"].as_object().unwrap().contains_key(
        "/apis/autoscaling/v1/namespaces/{namespace}/horizontalpodautoscalers/{name}/status"
    ));
}

#[tokio::test]
async fn one_object_two_versions() {
    let s = server().await;
    // Created through v1: defaulted as v1, stored as v2.
    let created = s.post(V1, v1_hpa("web", 60)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
    let created = created.json();
    assert_eq!(created["apiVersion"], "autoscaling/v1");
    assert_eq!(created["spec"]["minReplicas"], 1);
    assert_eq!(created["spec"]["targetCPUUtilizationPercentage"], 60);
    assert_eq!(
        created["status"],
        json!({"currentReplicas": 0, "desiredReplicas": 0})
    );
    let rv = created["metadata"]["resourceVersion"].clone();

    let v2 = s.get(&format!("{V2}/web")).await.json();
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(v2["metadata"]["resourceVersion"], rv);
    assert_eq!(v2["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(v2["spec"]["metrics"], json!([cpu_target(60)]));

    // v2 adds what v1 cannot say, updating at v1's resourceVersion.
    let mut update = v2.clone();
    update["spec"]["metrics"] = json!([
        cpu_target(60),
        {"type": "Pods", "pods": {"metric": {"name": "rps"},
            "target": {"type": "AverageValue", "averageValue": "10"}}}
    ]);
    update["spec"]["behavior"] = json!({"scaleDown": {"stabilizationWindowSeconds": 60,
        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 30}]}});
    let updated = s.put(&format!("{V2}/web"), update).await;
    assert_eq!(updated.status, StatusCode::OK, "{:?}", updated.body);

    // v1 sees it in annotations, and a v1 client writing the object back loses nothing.
    let mut read = s.get(&format!("{V1}/web")).await.json();
    assert_eq!(read["spec"]["targetCPUUtilizationPercentage"], 60);
    assert_eq!(
        annotation(&read, "autoscaling.alpha.kubernetes.io/metrics"),
        json!([{"type": "Pods", "pods": {"metricName": "rps", "targetAverageValue": "10"}}])
    );
    assert_eq!(
        annotation(&read, "autoscaling.alpha.kubernetes.io/behavior")["ScaleDown"]["StabilizationWindowSeconds"],
        60
    );
    read["metadata"]["labels"] = json!({"team": "a"});
    read["spec"]["targetCPUUtilizationPercentage"] = json!(70);
    let written = s.put(&format!("{V1}/web"), read).await;
    assert_eq!(written.status, StatusCode::OK, "{:?}", written.body);
    let v2 = s.get(&format!("{V2}/web")).await.json();
    assert_eq!(v2["metadata"]["labels"], json!({"team": "a"}));
    assert!(v2["metadata"].get("annotations").is_none(), "{v2}");
    assert_eq!(v2["spec"]["metrics"][0]["pods"]["metric"]["name"], "rps");
    assert_eq!(v2["spec"]["metrics"][1], cpu_target(70));
    assert_eq!(
        v2["spec"]["behavior"]["scaleDown"]["policies"],
        json!([{"type": "Pods", "value": 1, "periodSeconds": 30}])
    );
    // Defaulted as v2 defaults a behavior.
    assert_eq!(v2["spec"]["behavior"]["scaleUp"]["selectPolicy"], "Max");

    // Both versions list it, at one resourceVersion.
    let l1 = s.get(V1).await.json();
    let l2 = s.get(V2).await.json();
    assert_eq!(l1["kind"], "HorizontalPodAutoscalerList");
    assert_eq!(l1["apiVersion"], "autoscaling/v1");
    assert_eq!(
        l1["items"][0]["metadata"]["resourceVersion"],
        l2["items"][0]["metadata"]["resourceVersion"]
    );

    // Deleted through v1, gone from v2.
    assert_eq!(s.delete(&format!("{V1}/web")).await.status, StatusCode::OK);
    assert_eq!(
        s.get(&format!("{V2}/web")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn status_through_either_version() {
    let s = server().await;
    let created = s
        .post(
            V2,
            json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "maxReplicas": 5, "metrics": [cpu_target(50)]}}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
    let mut obj = created.json();
    obj["status"] = json!({
        "currentReplicas": 2, "desiredReplicas": 3,
        "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu",
            "current": {"averageUtilization": 45, "averageValue": "90m"}}}],
        "conditions": [{"type": "AbleToScale", "status": "True",
            "lastTransitionTime": "2025-01-01T00:00:00Z", "reason": "ReadyForNewScale"}]
    });
    let r = s.put(&format!("{V2}/web/status"), obj).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);

    let v1 = s.get(&format!("{V1}/web/status")).await.json();
    assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 45);
    assert_eq!(
        (
            &v1["status"]["currentReplicas"],
            &v1["status"]["desiredReplicas"]
        ),
        (&json!(2), &json!(3))
    );
    assert_eq!(
        annotation(&v1, "autoscaling.alpha.kubernetes.io/conditions")[0]["reason"],
        "ReadyForNewScale"
    );
    assert_eq!(
        annotation(&v1, "autoscaling.alpha.kubernetes.io/current-metrics")[0]["resource"],
        json!({"name": "cpu", "currentAverageUtilization": 45, "currentAverageValue": "90m"})
    );

    // A v1 status write changes the status only, and keeps what v1 carries in annotations.
    let mut w = v1.clone();
    w["status"]["desiredReplicas"] = json!(4);
    w["spec"]["maxReplicas"] = json!(50);
    w["metadata"]["annotations"]["team"] = json!("a");
    let r = s.put(&format!("{V1}/web/status"), w).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let v2 = s.get(&format!("{V2}/web")).await.json();
    assert_eq!(v2["status"]["desiredReplicas"], 4);
    assert_eq!(v2["status"]["conditions"][0]["reason"], "ReadyForNewScale");
    assert_eq!(
        v2["status"]["currentMetrics"][0]["resource"]["current"]["averageValue"],
        "90m"
    );
    assert_eq!(v2["spec"]["maxReplicas"], 5);
    assert!(v2["metadata"].get("annotations").is_none(), "{v2}");

    // An update of the main resource through v1 keeps the status.
    let mut w = s.get(&format!("{V1}/web")).await.json();
    w["status"] = json!({});
    w["metadata"]["annotations"] = json!({});
    let r = s.put(&format!("{V1}/web"), w).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let v2 = s.get(&format!("{V2}/web")).await.json();
    assert_eq!(v2["status"]["desiredReplicas"], 4);
    assert_eq!(v2["status"]["conditions"][0]["type"], "AbleToScale");
}

#[tokio::test]
async fn patches_and_apply_through_v1() {
    let s = server().await;
    let mut body = v1_hpa("web", 60);
    body["metadata"]["annotations"] = json!({"autoscaling.alpha.kubernetes.io/metrics":
        r#"[{"type":"Pods","pods":{"metricName":"rps","targetAverageValue":"10"}}]"#});
    assert_eq!(s.post(V1, body).await.status, StatusCode::CREATED);

    let merged = s
        .patch(
            &format!("{V1}/web"),
            MERGE,
            json!({"spec": {"maxReplicas": 7}}),
        )
        .await;
    assert_eq!(merged.status, StatusCode::OK, "{:?}", merged.body);
    assert_eq!(merged.json()["apiVersion"], "autoscaling/v1");
    let json_patch = s
        .patch(
            &format!("{V1}/web"),
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/spec/targetCPUUtilizationPercentage", "value": 65}]),
        )
        .await;
    assert_eq!(json_patch.status, StatusCode::OK, "{:?}", json_patch.body);
    let strategic = s
        .patch(
            &format!("{V1}/web"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"minReplicas": 2}}),
        )
        .await;
    assert_eq!(strategic.status, StatusCode::OK, "{:?}", strategic.body);

    let v2 = s.get(&format!("{V2}/web")).await.json();
    assert_eq!(
        (&v2["spec"]["minReplicas"], &v2["spec"]["maxReplicas"]),
        (&json!(2), &json!(7))
    );
    assert_eq!(v2["spec"]["metrics"][0]["pods"]["metric"]["name"], "rps");
    assert_eq!(v2["spec"]["metrics"][1], cpu_target(65));

    // Server-side apply through v1: the manager is recorded at v1.
    let apply = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "applied"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
                 "maxReplicas": 3, "targetCPUUtilizationPercentage": 40}});
    let applied = s
        .call(
            Method::PATCH,
            &format!("{V1}/applied?fieldManager=tester"),
            Some("application/apply-patch+yaml"),
            apply.to_string(),
        )
        .await;
    assert_eq!(applied.status, StatusCode::CREATED, "{:?}", applied.body);
    let v2 = s.get(&format!("{V2}/applied")).await.json();
    assert_eq!(v2["spec"]["metrics"], json!([cpu_target(40)]));
    let managers = v2["metadata"]["managedFields"].as_array().unwrap();
    let entry = managers.iter().find(|m| m["manager"] == "tester").unwrap();
    assert_eq!(entry["apiVersion"], "autoscaling/v1");
    assert_eq!(entry["operation"], "Apply");
    assert!(
        entry["fieldsV1"]["f:spec"]
            .as_object()
            .unwrap()
            .contains_key("f:targetCPUUtilizationPercentage")
    );
    // Applied again with a new target: the same manager's field changes.
    let mut again = apply.clone();
    again["spec"]["targetCPUUtilizationPercentage"] = json!(45);
    let applied = s
        .call(
            Method::PATCH,
            &format!("{V1}/applied?fieldManager=tester"),
            Some("application/apply-patch+yaml"),
            again.to_string(),
        )
        .await;
    assert_eq!(applied.status, StatusCode::OK, "{:?}", applied.body);
    assert_eq!(applied.json()["spec"]["targetCPUUtilizationPercentage"], 45);
}

#[tokio::test]
async fn watch_through_v1_sees_v2_writes() {
    let s = server().await;
    let start = s.get(V1).await.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let created = s
        .post(
            V2,
            json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5,
                 "metrics": [cpu_target(50)]}}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let r = s
        .patch(
            &format!("{V2}/web"),
            MERGE,
            json!({"spec": {"maxReplicas": 6}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(s.delete(&format!("{V2}/web")).await.status, StatusCode::OK);

    let reply = s
        .get(&format!(
            "{V1}?watch=1&resourceVersion={start}&timeoutSeconds=1"
        ))
        .await;
    let events: Vec<Value> = String::from_utf8_lossy(&reply.body)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, vec!["ADDED", "MODIFIED", "DELETED"]);
    for e in &events {
        assert_eq!(e["object"]["apiVersion"], "autoscaling/v1");
        assert_eq!(e["object"]["spec"]["targetCPUUtilizationPercentage"], 50);
    }
    assert_eq!(events[1]["object"]["spec"]["maxReplicas"], 6);
}

#[tokio::test]
async fn table_and_protobuf_at_v1() {
    let s = server().await;
    assert_eq!(
        s.post(V1, v1_hpa("web", 60)).await.status,
        StatusCode::CREATED
    );
    let table = s
        .get_accepting(V1, "application/json;as=Table;v=v1;g=meta.k8s.io")
        .await
        .json();
    assert_eq!(table["kind"], "Table");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        vec![
            "Name",
            "Reference",
            "Targets",
            "MinPods",
            "MaxPods",
            "Replicas",
            "Age"
        ]
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(
        (&cells[1], &cells[2]),
        (&json!("Deployment/web"), &json!("cpu: <unknown>/60%"))
    );

    let pb = s
        .get_accepting(&format!("{V1}/web"), "application/vnd.kubernetes.protobuf")
        .await;
    assert_eq!(pb.status, StatusCode::OK);
    let decoded = minik8s_apiserver::protobuf::decode_enveloped(&pb.body, "", "").unwrap();
    assert_eq!(decoded["apiVersion"], "autoscaling/v1");
    assert_eq!(decoded["spec"]["targetCPUUtilizationPercentage"], 60);
}

#[tokio::test]
async fn validation_as_upstream() {
    let s = server().await;
    // v1's CPU target is validated as the v2 metric it stands for.
    let r = s.post(V1, v1_hpa("zero", 0)).await;
    assert_eq!(
        causes(&r),
        vec![
            "spec.metrics[0].resource.target.averageUtilization: Invalid value: 0: must be greater than 0"
        ]
    );
    let mut bad = v1_hpa("bad", 50);
    bad["spec"]["maxReplicas"] = json!(0);
    bad["spec"]["scaleTargetRef"] = json!({"kind": "Deployment", "name": "a/b"});
    assert_eq!(
        causes(&s.post(V1, bad).await),
        vec![
            "spec.maxReplicas: Invalid value: 0: must be greater than 0",
            "spec.maxReplicas: Invalid value: 0: must be greater than or equal to `minReplicas`",
            "spec.scaleTargetRef.name: Invalid value: \"a/b\": may not contain '/'",
        ]
    );
    let mut garbled = v1_hpa("garbled", 50);
    garbled["metadata"]["annotations"] = json!({"autoscaling.alpha.kubernetes.io/metrics": "[{"});
    let r = s.post(V1, garbled).await;
    let c = causes(&r);
    assert_eq!(c.len(), 1);
    assert!(
        c[0].starts_with(
            "metadata.annotations[autoscaling.alpha.kubernetes.io/metrics]: Invalid value"
        ),
        "{c:?}"
    );

    let v2 = |metrics: Value, behavior: Value| {
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
               "metadata": {"name": "v2"},
               "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5,
                        "metrics": metrics, "behavior": behavior}})
    };
    let r = s
        .post(
            V2,
            v2(
                json!([
                    {"type": "Pods", "pods": {"metric": {"name": "rps"},
                        "target": {"type": "Utilization", "averageUtilization": 50}}},
                    {"type": "ContainerResource", "containerResource": {"name": "cpu",
                        "target": {"type": "AverageValue", "averageValue": "0"}}}
                ]),
                json!({"scaleUp": {"selectPolicy": "Fastest", "stabilizationWindowSeconds": 4000,
                    "policies": [{"type": "Percent", "value": 0, "periodSeconds": 2000}]}}),
            ),
        )
        .await;
    assert_eq!(
        causes(&r),
        vec![
            "spec.metrics[0].pods.target.averageValue: Required value: must specify a positive target averageValue",
            "spec.metrics[1].containerResource.container: Required value: must specify a container",
            "spec.metrics[1].containerResource.target.averageValue: Invalid value: \"0\": must be positive",
            "spec.behavior.scaleUp.stabilizationWindowSeconds: Invalid value: 4000: must be less than or equal to 3600",
            "spec.behavior.scaleUp.selectPolicy: Unsupported value: \"Fastest\": supported values: \"Disabled\", \"Max\", \"Min\"",
            "spec.behavior.scaleUp.policies[0].value: Invalid value: 0: must be greater than zero",
            "spec.behavior.scaleUp.policies[0].periodSeconds: Invalid value: 2000: must be less than or equal to 1800",
        ]
    );
    // The same object through v1 gets the same answer: its metrics travel in the annotation.
    let r = s
        .post(
            V1,
            json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "v1", "annotations": {"autoscaling.alpha.kubernetes.io/metrics":
                    r#"[{"type":"External","external":{"metricName":"q"}}]"#}},
                "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5}}),
        )
        .await;
    assert_eq!(
        causes(&r),
        vec![
            "spec.metrics[0].external.target.averageValue: Required value: must set either a target value for metric or a per-pod target"
        ]
    );
}
