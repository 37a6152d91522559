//! REST semantics through the router, in-process (no socket): what a client sees for each verb,
//! and the errors upstream gives for bad input.

use std::time::Duration;

use http::{Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use testkit::{Backend, InProcess};
use tower::ServiceExt;

async fn server() -> InProcess {
    InProcess::start(Backend::Sqlite).await.unwrap()
}

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"app": "web"}}, "data": {"k": "v"}})
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}})
}

fn rv(v: &Value) -> i64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn discovery_and_health() {
    let s = server().await;
    let v = s.get("/version").await.json();
    assert_eq!(
        (v["major"].as_str(), v["minor"].as_str()),
        (Some("1"), Some("32"))
    );
    assert!(v["gitVersion"].as_str().unwrap().starts_with("v1.32."));
    assert_eq!(s.get("/healthz").await.status, StatusCode::OK);
    let api = s.get("/api").await.json();
    assert_eq!(api["versions"], json!(["v1"]));
    let v1 = s.get("/api/v1").await.json();
    let pods = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods")
        .unwrap();
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert_eq!(pods["categories"], json!(["all"]));
    assert!(
        v1["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "pods/status")
    );
    let apps = s.get("/apis/apps/v1").await.json();
    let scale = apps["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "deployments/scale")
        .unwrap();
    assert_eq!(
        (scale["kind"].as_str(), scale["group"].as_str()),
        (Some("Scale"), Some("autoscaling"))
    );
    let groups = s.get("/apis").await.json();
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    for g in [
        "apps",
        "batch",
        "autoscaling",
        "networking.k8s.io",
        "rbac.authorization.k8s.io",
        "apiextensions.k8s.io",
    ] {
        assert!(names.contains(&g), "{g} missing from {names:?}");
    }
    // Aggregated discovery, as kubectl asks for it.
    let mut req = http::Request::get("/apis")
        .header(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
        )
        .body(axum::body::Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(minik8s_apiserver::auth::ClientCertIdentity(testkit::admin()));
    let resp = s.router.clone().oneshot(req).await.unwrap();
    assert_eq!(
        resp.headers()["content-type"],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let body: Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["kind"], "APIGroupDiscoveryList");
    let apps = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "apps")
        .unwrap();
    let deploy = apps["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "deployments")
        .unwrap();
    assert_eq!(deploy["shortNames"], json!(["deploy"]));
    // Metrics are served in Prometheus text format.
    s.get(CMS).await;
    let m = s.get("/metrics").await;
    let text = String::from_utf8_lossy(&m.body);
    for metric in [
        "apiserver_request_total",
        "apiserver_request_duration_seconds",
        "apiserver_storage_request_duration_seconds",
        "apiserver_storage_compaction_failures_total",
    ] {
        assert!(text.contains(metric), "{metric} missing");
    }
    // Unknown paths and resources are Status 404s.
    assert_eq!(
        s.get("/api/v1/nosuchthings").await.json()["reason"],
        "NotFound"
    );
    assert_eq!(
        s.get("/apis/nope.example.com/v1").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn anonymous_requests_are_refused() {
    let s = server().await;
    let req = http::Request::get("/api/v1/namespaces")
        .body(axum::body::Body::empty())
        .unwrap();
    let resp = s.router.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let req = http::Request::get("/healthz")
        .body(axum::body::Body::empty())
        .unwrap();
    assert_eq!(
        s.router.clone().oneshot(req).await.unwrap().status(),
        StatusCode::OK
    );
    let req = http::Request::get("/version")
        .body(axum::body::Body::empty())
        .unwrap();
    assert_eq!(
        s.router.clone().oneshot(req).await.unwrap().status(),
        StatusCode::OK
    );
    let req = http::Request::get("/api/v1/pods")
        .header("authorization", "Bearer wrong")
        .body(axum::body::Body::empty())
        .unwrap();
    assert_eq!(
        s.router.clone().oneshot(req).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn create_get_and_conflicts() {
    let s = server().await;
    let r = s.post(CMS, cm("a")).await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let created = r.json();
    assert!(created["metadata"]["uid"].as_str().unwrap().len() > 10);
    assert!(created["metadata"]["creationTimestamp"].is_string());
    assert_eq!(created["metadata"]["namespace"], "default");
    assert!(
        created["metadata"].get("generation").is_none(),
        "configmaps have no generation"
    );
    let got = s.get(&format!("{CMS}/a")).await.json();
    assert_eq!(got, created);
    // Create again: 409 AlreadyExists, worded as upstream.
    let dup = s.post(CMS, cm("a")).await;
    assert_eq!(dup.status, StatusCode::CONFLICT);
    let st = dup.json();
    assert_eq!(
        (st["reason"].as_str(), st["message"].as_str()),
        (
            Some("AlreadyExists"),
            Some("configmaps \"a\" already exists")
        )
    );
    assert_eq!(st["details"], json!({"name": "a", "kind": "configmaps"}));
    // generateName.
    let g = s
        .post(
            CMS,
            json!({"metadata": {"generateName": "gen-"}, "data": {}}),
        )
        .await
        .json();
    let name = g["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    // Update with a stale resourceVersion: 409 Conflict.
    let mut stale = created.clone();
    stale["data"]["k"] = "v2".into();
    let ok = s.put(&format!("{CMS}/a"), stale.clone()).await;
    assert_eq!(ok.status, StatusCode::OK);
    let conflict = s.put(&format!("{CMS}/a"), stale).await;
    assert_eq!(conflict.status, StatusCode::CONFLICT);
    assert!(
        conflict.json()["message"]
            .as_str()
            .unwrap()
            .contains("the object has been modified")
    );
    // Without a resourceVersion the update is unconditional.
    let mut latest = s.get(&format!("{CMS}/a")).await.json();
    latest["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    latest["data"]["k"] = "v3".into();
    let r = s.put(&format!("{CMS}/a"), latest).await.json();
    assert_eq!(r["data"]["k"], "v3");
    // A no-op update writes nothing and keeps the resourceVersion.
    let same = s.put(&format!("{CMS}/a"), r.clone()).await.json();
    assert_eq!(rv(&same), rv(&r));
    // System metadata cannot be changed by an update.
    let mut evil = r.clone();
    evil["metadata"]["creationTimestamp"] = "2000-01-01T00:00:00Z".into();
    let kept = s.put(&format!("{CMS}/a"), evil).await.json();
    assert_eq!(
        kept["metadata"]["creationTimestamp"],
        created["metadata"]["creationTimestamp"]
    );
    // PUT of a missing configmap is a 404 (configmaps do not allow create on update).
    assert_eq!(
        s.put(&format!("{CMS}/nope"), cm("nope")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let s = server().await;
    s.post(CMS, cm("keep")).await;
    let before = s.get(&format!("{CMS}/keep")).await.json();
    // Invalid name: 422 naming the field.
    let r = s.post(CMS, cm("Bad_Name")).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    let st = r.json();
    assert_eq!(st["reason"], "Invalid");
    assert_eq!(st["details"]["causes"][0]["field"], "metadata.name");
    assert!(st["message"].as_str().unwrap().starts_with(
        "ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\""
    ));
    // Pod without containers, with a bad restart policy.
    let mut p = pod("p");
    p["spec"]["containers"] = json!([]);
    p["spec"]["restartPolicy"] = "Sometimes".into();
    let st = s.post("/api/v1/namespaces/default/pods", p).await.json();
    let fields: Vec<&str> = st["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert!(
        fields.contains(&"spec.containers") && fields.contains(&"spec.restartPolicy"),
        "{fields:?}"
    );
    // Malformed JSON.
    let r = s
        .call(Method::POST, CMS, Some("application/json"), "{not json")
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("json parse error")
    );
    // Malformed YAML.
    let r = s
        .call(Method::POST, CMS, Some("application/yaml"), "a: [b")
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // YAML bodies work.
    let r = s
        .call(
            Method::POST,
            CMS,
            Some("application/yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\n",
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    // Kind that does not match the path.
    let r = s
        .post(
            CMS,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("cannot be handled as a ConfigMap")
    );
    // apiVersion of another group.
    let r = s
        .post(
            CMS,
            json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Namespace in the body differs from the URL.
    let mut other = cm("x");
    other["metadata"]["namespace"] = "kube-system".into();
    let r = s.post(CMS, other).await;
    assert_eq!(
        r.json()["message"],
        "the namespace of the provided object does not match the namespace sent on the request"
    );
    // Wrong field types.
    let r = s
        .post(CMS, json!({"metadata": {"name": "x"}, "data": 5}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // resourceVersion on create.
    let mut with_rv = cm("x");
    with_rv["metadata"]["resourceVersion"] = "5".into();
    assert_eq!(s.post(CMS, with_rv).await.status, StatusCode::BAD_REQUEST);
    // Unsupported media type.
    let r = s.call(Method::POST, CMS, Some("text/plain"), "x").await;
    assert_eq!(
        (r.status, r.json()["reason"].as_str()),
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Some("UnsupportedMediaType")
        )
    );
    // Bodies over 3 MiB: 413.
    let huge =
        json!({"metadata": {"name": "huge"}, "data": {"k": "x".repeat(3 * 1024 * 1024 + 10)}});
    assert_eq!(
        s.post(CMS, huge).await.status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    // Objects over the store's 1.5 MiB limit but under 3 MiB: a clear 413 too.
    let big = json!({"metadata": {"name": "big"}, "data": {"k": "x".repeat(1024 * 1024 - 10), "j": "y".repeat(700 * 1024)}});
    let r = s.post(CMS, big).await;
    assert!(
        matches!(
            r.status,
            StatusCode::PAYLOAD_TOO_LARGE | StatusCode::UNPROCESSABLE_ENTITY
        ),
        "{}",
        r.status
    );
    // Name in the body differs from the URL on update.
    let r = s.put(&format!("{CMS}/keep"), cm("other")).await;
    assert_eq!(
        r.json()["message"],
        "the name of the object (other) does not match the name on the URL (keep)"
    );
    // Namespaced resource addressed without a namespace; unknown namespace.
    assert_eq!(
        s.get("/api/v1/configmaps/keep").await.status,
        StatusCode::NOT_FOUND
    );
    let r = s.post("/api/v1/namespaces/nope/configmaps", cm("x")).await;
    assert_eq!(
        (r.status, r.json()["message"].as_str()),
        (StatusCode::NOT_FOUND, Some("namespaces \"nope\" not found"))
    );
    // Nothing that was refused changed what is stored.
    assert_eq!(s.get(&format!("{CMS}/keep")).await.json(), before);
    let names: Vec<String> = s.get(CMS).await.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["from-yaml", "keep"]);
}

#[tokio::test]
async fn defaults_generation_and_status() {
    let s = server().await;
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}},
        "status": {"replicas": 99}});
    let path = "/apis/apps/v1/namespaces/default/deployments";
    let d = s.post(path, deploy).await.json();
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], "25%");
    assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
    assert_eq!(d["metadata"]["generation"], 1);
    assert!(
        d.get("status").is_none() || d["status"].get("replicas").is_none(),
        "status is reset on create"
    );
    // A label change does not bump the generation; a spec change does.
    let item = format!("{path}/web");
    let l = s
        .patch(
            &item,
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"x": "y"}}}),
        )
        .await
        .json();
    assert_eq!(l["metadata"]["generation"], 1);
    let sp = s
        .patch(
            &item,
            "application/merge-patch+json",
            json!({"spec": {"replicas": 3}}),
        )
        .await
        .json();
    assert_eq!(sp["metadata"]["generation"], 2);
    // The main resource ignores status; the status subresource ignores spec.
    let st = s
        .patch(
            &item,
            "application/merge-patch+json",
            json!({"status": {"replicas": 5}}),
        )
        .await
        .json();
    assert!(st["status"].get("replicas").is_none());
    let st = s
        .patch(
            &format!("{item}/status"),
            "application/merge-patch+json",
            json!({"status": {"replicas": 5}, "spec": {"replicas": 9}}),
        )
        .await
        .json();
    assert_eq!(
        (
            st["status"]["replicas"].as_i64(),
            st["spec"]["replicas"].as_i64()
        ),
        (Some(5), Some(3))
    );
    assert_eq!(st["metadata"]["generation"], 2);
    // A Deployment's status may set annotations (the controller records the revision so, as
    // upstream's status strategy allows), not labels.
    let st = s
        .patch(
            &format!("{item}/status"),
            "application/merge-patch+json",
            json!({"metadata": {"annotations": {"deployment.kubernetes.io/revision": "1"}, "labels": {"x": "z"}}}),
        )
        .await
        .json();
    assert_eq!(
        st["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    assert_eq!(st["metadata"]["labels"]["x"], "y");
    assert_eq!(st["metadata"]["generation"], 2);
    // Selector is immutable in apps/v1.
    let r = s
        .patch(
            &item,
            "application/merge-patch+json",
            json!({"spec": {"selector": {"matchLabels": {"app": "other"}}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    // Scale subresource.
    let scale = s.get(&format!("{item}/scale")).await.json();
    assert_eq!(
        (
            scale["kind"].as_str(),
            scale["spec"]["replicas"].as_i64(),
            scale["status"]["selector"].as_str()
        ),
        (Some("Scale"), Some(3), Some("app=web"))
    );
    let scaled = s
        .patch(
            &format!("{item}/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 7}}),
        )
        .await
        .json();
    assert_eq!(scaled["spec"]["replicas"], 7);
    assert_eq!(s.get(&item).await.json()["spec"]["replicas"], 7);
    let r = s
        .patch(
            &format!("{item}/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": -1}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    // Secrets: stringData folds into data; type defaults to Opaque and is immutable.
    let sec = s
        .post(
            "/api/v1/namespaces/default/secrets",
            json!({"metadata": {"name": "s"}, "stringData": {"a": "b"}}),
        )
        .await
        .json();
    assert_eq!(
        (sec["type"].as_str(), sec["data"]["a"].as_str()),
        (Some("Opaque"), Some("Yg=="))
    );
    assert!(sec.get("stringData").is_none());
    let r = s
        .patch(
            "/api/v1/namespaces/default/secrets/s",
            "application/merge-patch+json",
            json!({"type": "other"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    // Services: type, ports and affinity defaults; DNS-1035 names.
    let svc = s
        .post(
            "/api/v1/namespaces/default/services",
            json!({"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}]}}),
        )
        .await
        .json();
    assert_eq!(
        (
            svc["spec"]["type"].as_str(),
            svc["spec"]["ports"][0]["targetPort"].as_i64()
        ),
        (Some("ClusterIP"), Some(80))
    );
    assert_eq!(
        s.post(
            "/api/v1/namespaces/default/services",
            json!({"metadata": {"name": "1svc"}, "spec": {"ports": [{"port": 80}]}})
        )
        .await
        .status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
}

#[tokio::test]
async fn patches() {
    let s = server().await;
    s.post(CMS, cm("p")).await;
    let item = format!("{CMS}/p");
    let r = s
        .patch(
            &item,
            "application/json-patch+json",
            json!([{"op": "add", "path": "/data/n", "value": "1"}]),
        )
        .await
        .json();
    assert_eq!(r["data"]["n"], "1");
    // A test of null passes on an absent path (kube-rs's finalizer helper sends this).
    let r = s.patch(&item, "application/json-patch+json", json!([{"op": "test", "path": "/metadata/finalizers", "value": null}, {"op": "add", "path": "/metadata/finalizers", "value": ["x.io/f"]}])).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.json()["metadata"]["finalizers"], json!(["x.io/f"]));
    s.patch(
        &item,
        "application/json-patch+json",
        json!([{"op": "remove", "path": "/metadata/finalizers"}]),
    )
    .await;
    // A failing test op: 422, and nothing changes.
    let r = s.patch(&item, "application/json-patch+json", json!([{"op": "test", "path": "/data/n", "value": "2"}, {"op": "remove", "path": "/data/n"}])).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(s.get(&item).await.json()["data"]["n"], "1");
    // Merge patch removing a key with null.
    let r = s
        .patch(
            &item,
            "application/merge-patch+json",
            json!({"data": {"n": null}}),
        )
        .await
        .json();
    assert!(r["data"].get("n").is_none());
    // A merge patch with a stale resourceVersion conflicts.
    let r = s
        .patch(
            &item,
            "application/merge-patch+json",
            json!({"metadata": {"resourceVersion": "1"}, "data": {"x": "y"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    // Patch types not supported yet are refused clearly, never a 500.
    let r = s.patch(&item, "text/plain", json!({})).await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // Patching what is not there: 404.
    assert_eq!(
        s.patch(
            &format!("{CMS}/nope"),
            "application/merge-patch+json",
            json!({})
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn deletes_finalizers_and_grace() {
    let s = server().await;
    s.post(CMS, cm("d")).await;
    // Configmaps answer a delete with a Status.
    let st = s.delete(&format!("{CMS}/d")).await.json();
    assert_eq!(
        (
            st["kind"].as_str(),
            st["status"].as_str(),
            st["details"]["name"].as_str()
        ),
        (Some("Status"), Some("Success"), Some("d"))
    );
    assert_eq!(
        s.get(&format!("{CMS}/d")).await.status,
        StatusCode::NOT_FOUND
    );
    // A finalizer keeps the object, with deletionTimestamp, until it is removed.
    let mut f = cm("f");
    f["metadata"]["finalizers"] = json!(["example.com/hold"]);
    s.post(CMS, f).await;
    let pending = s.delete(&format!("{CMS}/f")).await.json();
    assert!(pending["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(s.get(&format!("{CMS}/f")).await.status, StatusCode::OK);
    // No new finalizers while deleting.
    let r = s
        .patch(
            &format!("{CMS}/f"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    s.patch(
        &format!("{CMS}/f"),
        "application/json-patch+json",
        json!([{"op": "remove", "path": "/metadata/finalizers"}]),
    )
    .await;
    assert_eq!(
        s.get(&format!("{CMS}/f")).await.status,
        StatusCode::NOT_FOUND
    );
    // Preconditions.
    let c = s.post(CMS, cm("pre")).await.json();
    let body = json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-the-uid"}});
    let r = s
        .call(
            Method::DELETE,
            &format!("{CMS}/pre"),
            Some("application/json"),
            body.to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    let body = json!({"preconditions": {"uid": c["metadata"]["uid"], "resourceVersion": c["metadata"]["resourceVersion"]}});
    let r = s
        .call(
            Method::DELETE,
            &format!("{CMS}/pre"),
            Some("application/json"),
            body.to_string(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    // Pods: unscheduled pods go at once and come back as the object; scheduled pods wait for their grace period.
    let pods = "/api/v1/namespaces/default/pods";
    s.post(pods, pod("a")).await;
    let gone = s.delete(&format!("{pods}/a")).await.json();
    assert_eq!(gone["kind"], "Pod");
    assert_eq!(
        s.get(&format!("{pods}/a")).await.status,
        StatusCode::NOT_FOUND
    );
    let mut p = pod("b");
    p["spec"]["nodeName"] = "node-1".into();
    s.post(pods, p).await;
    let graceful = s.delete(&format!("{pods}/b")).await.json();
    assert_eq!(graceful["metadata"]["deletionGracePeriodSeconds"], 30);
    let shorter = s.delete(&format!("{pods}/b?gracePeriodSeconds=0")).await;
    assert_eq!(shorter.status, StatusCode::OK);
    assert_eq!(
        s.get(&format!("{pods}/b")).await.status,
        StatusCode::NOT_FOUND
    );
    // Propagation policy Orphan adds the orphan finalizer for the garbage collector.
    s.post(CMS, cm("o")).await;
    let o = s
        .delete(&format!("{CMS}/o?propagationPolicy=Orphan"))
        .await
        .json();
    assert_eq!(o["metadata"]["finalizers"], json!(["orphan"]));
    // A later delete with another policy swaps the propagation finalizer.
    let f = s
        .delete(&format!("{CMS}/o?propagationPolicy=Foreground"))
        .await
        .json();
    assert_eq!(f["metadata"]["finalizers"], json!(["foregroundDeletion"]));
    assert_eq!(
        s.delete(&format!("{CMS}/o?propagationPolicy=Sometimes"))
            .await
            .status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    // deletecollection with a label selector.
    for n in ["x1", "x2"] {
        s.post(CMS, cm(n)).await;
    }
    let mut keep = cm("x3");
    keep["metadata"]["labels"] = json!({"app": "db"});
    s.post(CMS, keep).await;
    let deleted = s
        .delete(&format!("{CMS}?labelSelector=app%3Dweb"))
        .await
        .json();
    assert_eq!(deleted["kind"], "ConfigMapList");
    let left: Vec<String> = s.get(CMS).await.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(left, ["o", "x3"]);
}

#[tokio::test]
async fn namespaces_terminate_and_finalize() {
    let s = server().await;
    s.post("/api/v1/namespaces", json!({"metadata": {"name": "team"}}))
        .await;
    let ns = s.get("/api/v1/namespaces/team").await.json();
    assert_eq!(
        (
            ns["status"]["phase"].as_str(),
            ns["spec"]["finalizers"][0].as_str()
        ),
        (Some("Active"), Some("kubernetes"))
    );
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "team"
    );
    s.post("/api/v1/namespaces/team/configmaps", cm("in-team"))
        .await;
    let t = s.delete("/api/v1/namespaces/team").await.json();
    assert_eq!(t["status"]["phase"], "Terminating");
    // A Terminating namespace refuses new objects.
    let r = s
        .post("/api/v1/namespaces/team/configmaps", cm("late"))
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("because it is being terminated")
    );
    // Finalizing removes it.
    let mut fin = s.get("/api/v1/namespaces/team").await.json();
    fin["spec"]["finalizers"] = json!([]);
    let r = s.put("/api/v1/namespaces/team/finalize", fin).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        s.get("/api/v1/namespaces/team").await.status,
        StatusCode::NOT_FOUND
    );
    // The system namespaces cannot be deleted.
    assert_eq!(
        s.delete("/api/v1/namespaces/default").await.status,
        StatusCode::FORBIDDEN
    );
    // Namespaces are cluster scoped: deletecollection is not served.
    assert_eq!(
        s.delete("/api/v1/namespaces").await.status,
        StatusCode::METHOD_NOT_ALLOWED
    );
}

#[tokio::test]
async fn binding() {
    let s = server().await;
    let pods = "/api/v1/namespaces/default/pods";
    s.post(pods, pod("p")).await;
    let b = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}});
    let r = s.post(&format!("{pods}/p/binding"), b.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED);
    let p = s.get(&format!("{pods}/p")).await.json();
    assert_eq!(p["spec"]["nodeName"], "n1");
    assert_eq!(p["status"]["conditions"][0]["type"], "PodScheduled");
    let again = s.post(&format!("{pods}/p/binding"), b).await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert!(
        again.json()["message"]
            .as_str()
            .unwrap()
            .contains("is already assigned to node \"n1\"")
    );
    // Node name cannot be changed through an update.
    let r = s
        .patch(
            &format!("{pods}/p"),
            "application/merge-patch+json",
            json!({"spec": {"nodeName": "n2"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);

    // The older `bindings` collection: the pod named in the body.
    s.post(pods, pod("q")).await;
    let bindings = "/api/v1/namespaces/default/bindings";
    let b = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "q"},
                   "target": {"kind": "Node", "name": "n2"}});
    let r = s.post(bindings, b).await;
    assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
    assert_eq!(
        s.get(&format!("{pods}/q")).await.json()["spec"]["nodeName"],
        "n2"
    );
    let nameless = json!({"apiVersion": "v1", "kind": "Binding", "target": {"name": "n2"}});
    let r = s.post(bindings, nameless).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{r:?}");
    assert_eq!(s.get(bindings).await.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn lists_selectors_and_paging() {
    let s = server().await;
    for i in 0..25 {
        let mut c = cm(&format!("c{i:02}"));
        c["metadata"]["labels"] =
            json!({"tier": if i % 2 == 0 { "even" } else { "odd" }, "i": i.to_string()});
        s.post(CMS, c).await;
    }
    s.post("/api/v1/namespaces", json!({"metadata": {"name": "other"}}))
        .await;
    s.post("/api/v1/namespaces/other/configmaps", cm("elsewhere"))
        .await;
    let all = s.get(CMS).await.json();
    assert_eq!(all["kind"], "ConfigMapList");
    assert_eq!(all["items"].as_array().unwrap().len(), 25);
    assert!(all["metadata"]["resourceVersion"].is_string());
    // All namespaces (with kube-system's extension-apiserver-authentication).
    assert_eq!(
        s.get("/api/v1/configmaps").await.json()["items"]
            .as_array()
            .unwrap()
            .len(),
        27
    );
    let only_other = s
        .get("/api/v1/configmaps?fieldSelector=metadata.namespace%3Dother")
        .await
        .json();
    assert_eq!(only_other["items"].as_array().unwrap().len(), 1);
    // Label selectors.
    let even = s
        .get(&format!("{CMS}?labelSelector=tier%3Deven"))
        .await
        .json();
    assert_eq!(even["items"].as_array().unwrap().len(), 13);
    let set = s
        .get(&format!("{CMS}?labelSelector=i%20in%20(1,2,3),tier!%3Dodd"))
        .await
        .json();
    assert_eq!(set["items"].as_array().unwrap().len(), 1);
    assert_eq!(
        s.get(&format!("{CMS}?labelSelector=a%20b")).await.status,
        StatusCode::BAD_REQUEST
    );
    // Field selectors: metadata.name, and refusal of fields the kind does not index.
    let one = s
        .get(&format!("{CMS}?fieldSelector=metadata.name%3Dc03"))
        .await
        .json();
    assert_eq!(one["items"][0]["metadata"]["name"], "c03");
    let r = s
        .get(&format!("{CMS}?fieldSelector=spec.nodeName%3Dx"))
        .await;
    assert_eq!(
        (r.status, r.json()["message"].as_str()),
        (
            StatusCode::BAD_REQUEST,
            Some("field label not supported: spec.nodeName")
        )
    );
    // Paging: consistent pages at one revision, remainingItemCount, continue.
    let p1 = s.get(&format!("{CMS}?limit=10")).await.json();
    assert_eq!(p1["items"].as_array().unwrap().len(), 10);
    assert_eq!(p1["metadata"]["remainingItemCount"], 15);
    let token = p1["metadata"]["continue"].as_str().unwrap().to_string();
    s.delete(&format!("{CMS}/c15")).await;
    s.post(CMS, cm("c99")).await;
    let p2 = s
        .get(&format!("{CMS}?limit=10&continue={token}"))
        .await
        .json();
    let names: Vec<&str> = p2["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.first(), Some(&"c10"));
    assert!(
        names.contains(&"c15"),
        "page 2 is read at page 1's revision"
    );
    assert_eq!(
        p2["metadata"]["resourceVersion"],
        p1["metadata"]["resourceVersion"]
    );
    let p3 = s
        .get(&format!(
            "{CMS}?limit=10&continue={}",
            p2["metadata"]["continue"].as_str().unwrap()
        ))
        .await
        .json();
    assert_eq!(p3["items"].as_array().unwrap().len(), 5);
    assert!(p3["metadata"].get("continue").is_none());
    // Paging with a selector: pages still fill up.
    let e1 = s
        .get(&format!("{CMS}?limit=5&labelSelector=tier%3Dodd"))
        .await
        .json();
    assert_eq!(e1["items"].as_array().unwrap().len(), 5);
    assert!(e1["metadata"]["continue"].is_string());
    // Exact reads of an old revision, and garbage tokens.
    let old = s
        .get(&format!(
            "{CMS}?resourceVersion={}&resourceVersionMatch=Exact",
            all["metadata"]["resourceVersion"].as_str().unwrap()
        ))
        .await
        .json();
    assert_eq!(old["items"].as_array().unwrap().len(), 25);
    assert!(
        old["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["metadata"]["name"] == "c15")
    );
    assert_eq!(
        s.get(&format!("{CMS}?continue=garbage")).await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        s.get(&format!("{CMS}?resourceVersionMatch=Exact"))
            .await
            .status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    // A resourceVersion the store has not reached: 504 after a short wait.
    let r = s
        .get(&format!(
            "{CMS}?resourceVersion=99999999&resourceVersionMatch=NotOlderThan"
        ))
        .await;
    assert_eq!(
        (r.status, r.json()["reason"].as_str()),
        (StatusCode::GATEWAY_TIMEOUT, Some("Timeout"))
    );
    // After compaction, old revisions and old continue tokens are gone (410).
    let current = s.server.store.current_revision().await.unwrap();
    s.server.store.compact(current).await.unwrap();
    let r = s.get(&format!("{CMS}?limit=10&continue={token}")).await;
    assert_eq!(
        (r.status, r.json()["reason"].as_str()),
        (StatusCode::GONE, Some("Expired"))
    );
    let r = s
        .get(&format!(
            "{CMS}?resourceVersion={}&resourceVersionMatch=Exact",
            all["metadata"]["resourceVersion"].as_str().unwrap()
        ))
        .await;
    assert_eq!(r.status, StatusCode::GONE);
}

/// Reads a streaming watch response line by line.
struct WatchReader {
    body: axum::body::Body,
    buf: Vec<u8>,
}

impl WatchReader {
    async fn open(s: &InProcess, path: &str) -> WatchReader {
        let mut req = http::Request::get(path)
            .body(axum::body::Body::empty())
            .unwrap();
        req.extensions_mut()
            .insert(minik8s_apiserver::auth::ClientCertIdentity(testkit::admin()));
        let resp = s.router.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        WatchReader {
            body: resp.into_body(),
            buf: Vec::new(),
        }
    }

    /// The next event, or `None` when the server ended the stream.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(serde_json::from_slice(&line).unwrap());
            }
            let frame = tokio::time::timeout(Duration::from_secs(10), self.body.frame())
                .await
                .expect("watch event in time")?;
            if let Ok(data) = frame.unwrap().into_data() {
                self.buf.extend_from_slice(&data);
            }
        }
    }

    async fn next_not_bookmark(&mut self) -> Value {
        loop {
            let e = self.next().await.expect("stream open");
            if e["type"] != "BOOKMARK" {
                return e;
            }
        }
    }
}

#[tokio::test]
async fn watches() {
    let s = server().await;
    let first = s.post(CMS, cm("w1")).await.json();
    // From a resourceVersion: only later changes.
    let mut w =
        WatchReader::open(&s, &format!("{CMS}?watch=1&resourceVersion={}", rv(&first))).await;
    let second = s.post(CMS, cm("w2")).await.json();
    let e = w.next().await.unwrap();
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("w2"))
    );
    assert_eq!(
        e["object"]["metadata"]["resourceVersion"],
        second["metadata"]["resourceVersion"]
    );
    s.patch(
        &format!("{CMS}/w2"),
        "application/merge-patch+json",
        json!({"data": {"z": "1"}}),
    )
    .await;
    assert_eq!(w.next().await.unwrap()["type"], "MODIFIED");
    let del = s.delete(&format!("{CMS}/w2")).await;
    assert_eq!(del.status, StatusCode::OK);
    let d = w.next().await.unwrap();
    assert_eq!(
        (d["type"].as_str(), d["object"]["data"]["z"].as_str()),
        (Some("DELETED"), Some("1"))
    );
    assert!(rv(&d["object"]) > rv(&second));
    // Without a resourceVersion: the current state first, then the initial-events-end bookmark.
    let mut init = WatchReader::open(&s, &format!("{CMS}?watch=1&allowWatchBookmarks=true")).await;
    let a = init.next().await.unwrap();
    assert_eq!(
        (a["type"].as_str(), a["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("w1"))
    );
    let b = init.next().await.unwrap();
    assert_eq!(b["type"], "BOOKMARK");
    assert_eq!(
        b["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    // Streaming lists as kube-rs asks for them.
    let mut sl = WatchReader::open(&s, &format!("{CMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")).await;
    assert_eq!(sl.next().await.unwrap()["type"], "ADDED");
    assert_eq!(sl.next().await.unwrap()["type"], "BOOKMARK");
    assert_eq!(
        s.get(&format!("{CMS}?watch=1&sendInitialEvents=true"))
            .await
            .status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    // Selector transitions: leaving the selection is a DELETED, entering it an ADDED.
    let mut sel = WatchReader::open(
        &s,
        &format!(
            "{CMS}?watch=1&labelSelector=app%3Dweb&resourceVersion={}",
            rv(&first)
        ),
    )
    .await;
    // Skip the earlier events of w2.
    for _ in 0..3 {
        sel.next_not_bookmark().await;
    }
    s.patch(
        &format!("{CMS}/w1"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"app": "db"}}}),
    )
    .await;
    let out = sel.next_not_bookmark().await;
    assert_eq!(
        (
            out["type"].as_str(),
            out["object"]["metadata"]["labels"]["app"].as_str()
        ),
        (Some("DELETED"), Some("web"))
    );
    s.patch(
        &format!("{CMS}/w1"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"app": "web"}}}),
    )
    .await;
    assert_eq!(sel.next_not_bookmark().await["type"], "ADDED");
    // Quiet watchers get bookmarks with a newer resourceVersion when they ask for them.
    let mut quiet = WatchReader::open(&s, &format!("/api/v1/namespaces/default/secrets?watch=1&allowWatchBookmarks=true&resourceVersion={}", rv(&first))).await;
    let moved = s.post(CMS, cm("w3")).await.json();
    loop {
        let e = quiet.next().await.unwrap();
        assert_eq!(e["type"], "BOOKMARK");
        if rv(&e["object"]) >= rv(&moved) {
            break;
        }
    }
    // timeoutSeconds ends the stream.
    let mut short = WatchReader::open(
        &s,
        &format!(
            "/api/v1/namespaces/default/secrets?watch=1&timeoutSeconds=1&resourceVersion={}",
            rv(&moved)
        ),
    )
    .await;
    assert!(short.next().await.is_none());
    // A compacted resourceVersion: 200, then one ERROR event with a 410 Status.
    let current = s.server.store.current_revision().await.unwrap();
    s.server.store.compact(current).await.unwrap();
    let mut old =
        WatchReader::open(&s, &format!("{CMS}?watch=1&resourceVersion={}", rv(&first))).await;
    let err = old.next().await.unwrap();
    assert_eq!(err["type"], "ERROR");
    assert_eq!(
        (
            err["object"]["code"].as_i64(),
            err["object"]["reason"].as_str()
        ),
        (Some(410), Some("Expired"))
    );
    assert!(
        err["object"]["message"]
            .as_str()
            .unwrap()
            .starts_with("too old resource version")
    );
    assert!(old.next().await.is_none());
}

#[tokio::test]
async fn events_are_one_resource_in_two_apis() {
    let s = server().await;
    let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "p.1", "namespace": "default"},
        "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "example.com/ctl",
        "reportingInstance": "ctl-1", "action": "Bind", "reason": "Scheduled", "note": "assigned", "type": "Normal",
        "regarding": {"kind": "Pod", "name": "p", "namespace": "default", "uid": "u1"}});
    let r = s
        .post("/apis/events.k8s.io/v1/namespaces/default/events", v1)
        .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    // kubectl describe reads core/v1 events by involvedObject.
    let core = s.get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dp,involvedObject.uid%3Du1").await.json();
    let item = &core["items"][0];
    assert_eq!(
        (
            item["message"].as_str(),
            item["reason"].as_str(),
            item["reportingComponent"].as_str()
        ),
        (Some("assigned"), Some("Scheduled"), Some("example.com/ctl"))
    );
    // And the other way round.
    let legacy = json!({"metadata": {"name": "p.2"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Pulled", "message": "image present", "type": "Normal", "count": 3, "source": {"component": "kubelet"}});
    assert_eq!(
        s.post("/api/v1/namespaces/default/events", legacy)
            .await
            .status,
        StatusCode::CREATED
    );
    let e = s
        .get("/apis/events.k8s.io/v1/namespaces/default/events/p.2")
        .await
        .json();
    assert_eq!(
        (
            e["note"].as_str(),
            e["deprecatedCount"].as_i64(),
            e["regarding"]["name"].as_str()
        ),
        (Some("image present"), Some(3), Some("p"))
    );
    assert_eq!(e["apiVersion"], "events.k8s.io/v1");
}

async fn get_as(s: &InProcess, path: &str, accept: &str) -> testkit::Reply {
    let mut req = http::Request::get(path)
        .header("accept", accept)
        .body(axum::body::Body::empty())
        .unwrap();
    req.extensions_mut()
        .insert(minik8s_apiserver::auth::ClientCertIdentity(testkit::admin()));
    let resp = s.router.clone().oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    testkit::Reply {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

#[tokio::test]
async fn tables_and_partial_metadata() {
    let s = server().await;
    let pods = "/api/v1/namespaces/default/pods";
    s.post(pods, pod("t1")).await;
    let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let r = get_as(&s, pods, kubectl).await;
    assert_eq!(
        r.headers["content-type"],
        "application/json;as=Table;v=v1;g=meta.k8s.io"
    );
    let t = r.json();
    assert_eq!(t["kind"], "Table");
    let names: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(&names[..5], ["Name", "Ready", "Status", "Restarts", "Age"]);
    assert!(names.contains(&"Nominated Node"));
    let row = &t["rows"][0];
    assert_eq!(
        (
            row["cells"][0].as_str(),
            row["cells"][1].as_str(),
            row["cells"][2].as_str()
        ),
        (Some("t1"), Some("0/1"), Some("Pending"))
    );
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(row["object"]["metadata"]["name"], "t1");
    // A single object as a table, and includeObject=Object.
    let one = get_as(&s, &format!("{pods}/t1?includeObject=Object"), kubectl)
        .await
        .json();
    assert_eq!(one["rows"][0]["object"]["kind"], "Pod");
    // Kinds without a printer get NAME and CREATED AT.
    let crds = get_as(
        &s,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        kubectl,
    )
    .await
    .json();
    assert_eq!(crds["columnDefinitions"][1]["name"], "Created At");
    // Metadata-only lists, as kube-rs metadata watchers ask.
    let m = get_as(
        &s,
        pods,
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
    )
    .await
    .json();
    assert_eq!(
        (m["kind"].as_str(), m["items"][0]["kind"].as_str()),
        (
            Some("PartialObjectMetadataList"),
            Some("PartialObjectMetadata")
        )
    );
    assert!(m["items"][0].get("spec").is_none());
    // YAML responses, and a media type nothing here produces.
    let y = get_as(&s, &format!("{pods}/t1"), "application/yaml").await;
    assert!(String::from_utf8_lossy(&y.body).contains("kind: Pod"));
    let n = get_as(&s, pods, "text/html").await;
    assert_eq!(
        (n.status, n.json()["reason"].as_str()),
        (StatusCode::NOT_ACCEPTABLE, Some("NotAcceptable"))
    );
}

/// A read for a resourceVersion just ahead of the store waits for it instead of failing.
#[tokio::test]
async fn reads_wait_for_a_revision_about_to_exist() {
    let s = server().await;
    let next = s.server.store.current_revision().await.unwrap() + 1;
    let path = format!("{CMS}?resourceVersion={next}&resourceVersionMatch=NotOlderThan");
    let (list, _) = tokio::join!(s.get(&path), async {
        tokio::task::yield_now().await;
        s.post(CMS, cm("arrives")).await
    });
    assert_eq!(
        list.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&list.body)
    );
    assert!(rv(&list.json()) >= next);
}
