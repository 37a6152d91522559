//! Extended resources (devices a device plugin advertises, such as `nvidia.com/gpu`) in pods
//! and in the pod templates of workloads: they cannot be overcommitted, so a container asks
//! for exactly its limit, in whole devices, and the API refuses anything else with 422, as
//! upstream's ValidateContainerResourceRequirements does.

use http::StatusCode;
use serde_json::{Value, json};
use testkit::{Backend, InProcess};

const PODS: &str = "/api/v1/namespaces/default/pods";
const JOBS: &str = "/apis/batch/v1/namespaces/default/jobs";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";

fn pod_spec(resources: Value) -> Value {
    json!({"restartPolicy": "Never",
           "containers": [{"name": "cuda", "image": "python:3", "resources": resources}]})
}

fn pod(name: &str, resources: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": pod_spec(resources)})
}

fn job(name: &str, resources: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
           "spec": {"template": {"spec": pod_spec(resources)}}})
}

fn deployment(name: &str, resources: Value) -> Value {
    let mut spec = pod_spec(resources);
    spec["restartPolicy"] = json!("Always");
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
           "spec": {"selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})
}

/// The 422's message and its one cause (field, message).
fn invalid(r: &testkit::Reply) -> (String, (String, String)) {
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{:?}", r.json());
    let body = r.json();
    assert_eq!(body["reason"], "Invalid");
    assert_eq!(body["code"], 422);
    let causes = body["details"]["causes"].as_array().unwrap();
    assert_eq!(causes.len(), 1, "{body:?}");
    (
        body["message"].as_str().unwrap().to_string(),
        (
            causes[0]["field"].as_str().unwrap().to_string(),
            causes[0]["message"].as_str().unwrap().to_string(),
        ),
    )
}

#[tokio::test]
async fn extended_resources_need_requests_equal_to_limits() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();

    // A limit alone is enough: the pod's request defaults to it.
    let r = s
        .post(
            PODS,
            pod("one-gpu", json!({"limits": {"nvidia.com/gpu": "1"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let resources = &r.json()["spec"]["containers"][0]["resources"];
    assert_eq!(resources["requests"]["nvidia.com/gpu"], "1");
    assert_eq!(r.json()["status"]["qosClass"], "BestEffort");

    let r = s
        .post(
            PODS,
            pod(
                "less",
                json!({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}),
            ),
        )
        .await;
    assert_eq!(
        invalid(&r),
        (
            "Pod \"less\" is invalid: spec.containers[0].resources.requests: Invalid value: \"1\": \
             must be equal to nvidia.com/gpu limit of 2"
                .to_string(),
            (
                "spec.containers[0].resources.requests".to_string(),
                "Invalid value: \"1\": must be equal to nvidia.com/gpu limit of 2".to_string()
            )
        )
    );

    let r = s
        .post(
            PODS,
            pod("no-limit", json!({"requests": {"example.com/dev": "1"}})),
        )
        .await;
    assert_eq!(
        invalid(&r).0,
        "Pod \"no-limit\" is invalid: spec.containers[0].resources.limits: Required value: \
         Limit must be set for non overcommitable resources"
    );

    let r = s
        .post(
            PODS,
            pod("half", json!({"limits": {"example.com/dev": "500m"}})),
        )
        .await;
    // The defaulted request is as invalid as the limit it came from.
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        r.json()["message"],
        "Pod \"half\" is invalid: [spec.containers[0].resources.limits[example.com/dev]: Invalid \
         value: 500m: must be an integer, spec.containers[0].resources.requests[example.com/dev]: \
         Invalid value: 500m: must be an integer]"
    );
}

#[tokio::test]
async fn workload_templates_get_the_same_checks() {
    let s = InProcess::start(Backend::Sqlite).await.unwrap();
    let unequal = json!({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}});

    let r = s.post(JOBS, job("train", unequal.clone())).await;
    assert_eq!(
        invalid(&r).0,
        "Job.batch \"train\" is invalid: spec.template.spec.containers[0].resources.requests: \
         Invalid value: \"1\": must be equal to nvidia.com/gpu limit of 2"
    );
    // A template's requests are not defaulted from its limits: a request alone is refused.
    let r = s
        .post(
            JOBS,
            job("bare", json!({"requests": {"nvidia.com/gpu": "1"}})),
        )
        .await;
    assert_eq!(
        invalid(&r).0,
        "Job.batch \"bare\" is invalid: spec.template.spec.containers[0].resources.limits: \
         Required value: Limit must be set for non overcommitable resources"
    );
    let r = s.post(DEPLOYMENTS, deployment("serve", unequal)).await;
    assert_eq!(
        invalid(&r).1,
        (
            "spec.template.spec.containers[0].resources.requests".to_string(),
            "Invalid value: \"1\": must be equal to nvidia.com/gpu limit of 2".to_string()
        )
    );

    let gpu = json!({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}});
    let r = s.post(JOBS, job("ok", gpu.clone())).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let r = s.post(DEPLOYMENTS, deployment("ok", gpu)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
}
