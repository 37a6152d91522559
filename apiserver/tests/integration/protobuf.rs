//! Protobuf over the router, in-process: the bodies kubectl 1.32 sends for `create
//! deployment|namespace|configmap|secret` and `auth can-i`, and protobuf answers (objects,
//! lists, watch streams, errors) for clients that accept only protobuf. Bodies are built with
//! k8s-pb's prost types, as a Go client's gogo-protobuf writes them (zeros included).

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::authorization::v1 as authz;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use minik8s_apiserver::auth::ClientCertIdentity;
use minik8s_apiserver::protobuf;
use prost::Message;
use serde_json::{Value, json};
use testkit::{Backend, InProcess, Reply, admin};
use tower::ServiceExt;

const PB: &str = "application/vnd.kubernetes.protobuf";
/// What client-go sends when its content type is protobuf.
const PB_OR_JSON: &str = "application/vnd.kubernetes.protobuf, application/json";

async fn server() -> InProcess {
    InProcess::start(Backend::Sqlite).await.unwrap()
}

async fn call(
    s: &InProcess,
    method: Method,
    path: &str,
    content_type: Option<&str>,
    accept: Option<&str>,
    body: impl Into<Bytes>,
) -> Reply {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(ct) = content_type {
        req = req.header(header::CONTENT_TYPE, ct);
    }
    if let Some(a) = accept {
        req = req.header(header::ACCEPT, a);
    }
    let mut req = req.body(axum::body::Body::from(body.into())).unwrap();
    req.extensions_mut().insert(ClientCertIdentity(admin()));
    let resp = s.router.clone().oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

fn content_type(r: &Reply) -> &str {
    r.headers[header::CONTENT_TYPE].to_str().unwrap()
}

/// `k8s\0` + runtime.Unknown around a prost message, as client-go's protobuf serializer writes.
fn envelope(api_version: &str, kind: &str, raw: impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

fn st(v: &str) -> Option<String> {
    Some(v.to_string())
}

/// ObjectMeta as Go writes an ObjectMeta value: every string and the zero time present.
fn go_meta(name: &str, labels: &[(&str, &str)]) -> meta::ObjectMeta {
    meta::ObjectMeta {
        name: st(name),
        generate_name: st(""),
        namespace: st(""),
        self_link: st(""),
        uid: st(""),
        resource_version: st(""),
        generation: Some(0),
        creation_timestamp: Some(meta::Time::default()),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

/// The Deployment `kubectl create deployment web --image=busybox:1.36 --replicas=2 -- sleep
/// 3600` builds.
fn kubectl_deployment(name: &str, replicas: i32) -> Vec<u8> {
    let labels = [("app", "web")];
    let d = apps::Deployment {
        metadata: Some(go_meta(name, &labels)),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(replicas),
            selector: Some(meta::LabelSelector {
                match_labels: [("app".into(), "web".into())].into(),
                ..Default::default()
            }),
            template: Some(core::PodTemplateSpec {
                metadata: Some(go_meta("", &labels)),
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: st("busybox"),
                        image: st("busybox:1.36"),
                        command: vec!["sleep".into(), "3600".into()],
                        working_dir: st(""),
                        resources: Some(core::ResourceRequirements::default()),
                        termination_message_path: st(""),
                        image_pull_policy: st(""),
                        stdin: Some(false),
                        stdin_once: Some(false),
                        tty: Some(false),
                        termination_message_policy: st(""),
                        ..Default::default()
                    }],
                    restart_policy: st(""),
                    dns_policy: st(""),
                    service_account_name: st(""),
                    service_account: st(""),
                    node_name: st(""),
                    host_network: Some(false),
                    host_pid: Some(false),
                    host_ipc: Some(false),
                    hostname: st(""),
                    subdomain: st(""),
                    scheduler_name: st(""),
                    ..Default::default()
                }),
            }),
            strategy: Some(apps::DeploymentStrategy {
                r#type: st(""),
                rolling_update: None,
            }),
            min_ready_seconds: Some(0),
            paused: Some(false),
            ..Default::default()
        }),
        status: Some(apps::DeploymentStatus {
            observed_generation: Some(0),
            replicas: Some(0),
            updated_replicas: Some(0),
            ready_replicas: Some(0),
            available_replicas: Some(0),
            unavailable_replicas: Some(0),
            ..Default::default()
        }),
    };
    envelope("apps/v1", "Deployment", d)
}

const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";

#[tokio::test]
async fn kubectl_create_deployment() {
    let s = server().await;
    let r = call(
        &s,
        Method::POST,
        &format!("{DEPLOYS}?fieldManager=kubectl-create&fieldValidation=Strict"),
        Some(PB),
        Some(PB_OR_JSON),
        kubectl_deployment("web", 2),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    // The client takes JSON too: it gets JSON.
    assert_eq!(content_type(&r), "application/json");
    assert!(r.headers.get(header::WARNING).is_none());
    let d = s.get(&format!("{DEPLOYS}/web")).await.json();
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
    assert_eq!(d["spec"]["minReadySeconds"], Value::Null);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Always");
    assert_eq!(pod["dnsPolicy"], "ClusterFirst");
    assert_eq!(pod["schedulerName"], "default-scheduler");
    assert_eq!(pod["hostNetwork"], Value::Null);
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "busybox:1.36");
    assert_eq!(c["command"], json!(["sleep", "3600"]));
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(c["stdin"], Value::Null);
    assert_eq!(d["metadata"]["namespace"], "default");
    assert_eq!(d["metadata"]["generateName"], Value::Null);
    assert_eq!(d["status"].get("replicas"), None);

    // Zero replicas is a value (a Go pointer), not "unset".
    let r = call(
        &s,
        Method::POST,
        DEPLOYS,
        Some(PB),
        Some(PB_OR_JSON),
        kubectl_deployment("zero", 0),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.json()["spec"]["replicas"], 0);
}

#[tokio::test]
async fn kubectl_create_namespace_configmap_secret() {
    let s = server().await;
    let ns = core::Namespace {
        metadata: Some(go_meta("x", &[])),
        spec: Some(core::NamespaceSpec::default()),
        status: Some(core::NamespaceStatus {
            phase: st(""),
            ..Default::default()
        }),
    };
    let r = call(
        &s,
        Method::POST,
        "/api/v1/namespaces",
        Some(PB),
        Some(PB_OR_JSON),
        envelope("v1", "Namespace", ns),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let v = r.json();
    assert_eq!(v["status"]["phase"], "Active");
    assert_eq!(v["spec"]["finalizers"], json!(["kubernetes"]));

    let cm = core::ConfigMap {
        metadata: Some(go_meta("c", &[])),
        data: [("a".into(), "b".into())].into(),
        ..Default::default()
    };
    let r = call(
        &s,
        Method::POST,
        "/api/v1/namespaces/default/configmaps",
        Some(PB),
        Some(PB_OR_JSON),
        envelope("v1", "ConfigMap", cm),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.json()["data"], json!({"a": "b"}));

    let secret = core::Secret {
        metadata: Some(go_meta("s", &[])),
        data: [("a".into(), b"b".to_vec()), ("bin".into(), vec![0, 255])].into(),
        r#type: st(""),
        ..Default::default()
    };
    let r = call(
        &s,
        Method::POST,
        "/api/v1/namespaces/default/secrets",
        Some(PB),
        Some(PB_OR_JSON),
        envelope("v1", "Secret", secret),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let v = s.get("/api/v1/namespaces/default/secrets/s").await.json();
    assert_eq!(v["data"], json!({"a": "Yg==", "bin": "AP8="}));
    assert_eq!(v["type"], "Opaque");
}

#[tokio::test]
async fn protobuf_answers_for_protobuf_only_clients() {
    let s = server().await;
    for name in ["a", "b"] {
        let r = s
            .post(
                "/api/v1/namespaces/default/configmaps",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": name}}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let path = "/api/v1/namespaces/default/configmaps";

    // get
    let r = call(&s, Method::GET, &format!("{path}/a"), None, Some(PB), "").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(content_type(&r), PB);
    assert!(r.body.starts_with(b"k8s\0"));
    let env = Unknown::decode(&r.body[4..]).unwrap();
    assert_eq!(
        env.type_meta.unwrap(),
        TypeMeta {
            api_version: st("v1"),
            kind: st("ConfigMap")
        }
    );
    let cm = core::ConfigMap::decode(env.raw.as_deref().unwrap()).unwrap();
    assert_eq!(cm.data["k"], "a");
    let meta = cm.metadata.unwrap();
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert!(meta.creation_timestamp.unwrap().seconds.unwrap() > 1_600_000_000);
    let json = s.get(&format!("{path}/a")).await.json();
    assert_eq!(
        protobuf::decode_enveloped(&r.body, "", "").unwrap(),
        json,
        "protobuf and JSON answers differ"
    );

    // list
    let r = call(&s, Method::GET, path, None, Some(PB), "").await;
    assert_eq!(r.status, StatusCode::OK);
    let list = protobuf::decode_enveloped(&r.body, "", "").unwrap();
    assert_eq!(list["kind"], "ConfigMapList");
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    assert!(list["metadata"]["resourceVersion"].as_str().is_some());
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    // watch: length-prefixed WatchEvents, objects enveloped
    let r = call(
        &s,
        Method::GET,
        &format!("{path}?watch=true&resourceVersion=0&timeoutSeconds=1"),
        None,
        Some(PB),
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        content_type(&r),
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    let (events, rest) = protobuf::decode_watch_frames(&r.body).unwrap();
    assert!(rest.is_empty());
    let added: Vec<&str> = events
        .iter()
        .filter(|(t, _)| t == "ADDED")
        .map(|(_, o)| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(added, ["a", "b"]);
    // Each frame decodes with prost as a meta.v1.WatchEvent too.
    let len = u32::from_be_bytes(r.body[..4].try_into().unwrap()) as usize;
    let ev = meta::WatchEvent::decode(&r.body[4..4 + len]).unwrap();
    assert_eq!(ev.r#type.as_deref(), Some("ADDED"));
    assert!(ev.object.unwrap().raw.unwrap().starts_with(b"k8s\0"));

    // the current state, then the initial-events-end bookmark
    let r = call(
        &s,
        Method::GET,
        &format!("{path}?watch=true&allowWatchBookmarks=true&timeoutSeconds=1"),
        None,
        Some(PB),
        "",
    )
    .await;
    let (events, _) = protobuf::decode_watch_frames(&r.body).unwrap();
    let (ty, bookmark) = &events[2];
    assert_eq!(ty, "BOOKMARK");
    assert_eq!(bookmark["kind"], "ConfigMap");
    assert_eq!(
        bookmark["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let at: u64 = bookmark["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(at >= rv.parse::<u64>().unwrap());

    // a write answered in protobuf
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let r = call(
        &s,
        Method::POST,
        path,
        Some("application/json"),
        Some(PB),
        body.to_string(),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(content_type(&r), PB);
    let v = protobuf::decode_enveloped(&r.body, "", "").unwrap();
    assert_eq!(v["metadata"]["name"], "c");
    let r = call(&s, Method::DELETE, &format!("{path}/c"), None, Some(PB), "").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        protobuf::decode_enveloped(&r.body, "", "").unwrap()["kind"],
        "Status"
    );

    // errors as a protobuf Status
    let r = call(
        &s,
        Method::GET,
        &format!("{path}/missing"),
        None,
        Some(PB),
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(content_type(&r), PB);
    let status = meta::Status::decode(
        Unknown::decode(&r.body[4..])
            .unwrap()
            .raw
            .as_deref()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(status.reason.as_deref(), Some("NotFound"));
    assert_eq!(status.code, Some(404));

    // the scale subresource
    let r = s
        .post(
            DEPLOYS,
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                   "spec": {"replicas": 3, "selector": {"matchLabels": {"a": "b"}},
                            "template": {"metadata": {"labels": {"a": "b"}},
                                         "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let r = call(
        &s,
        Method::GET,
        &format!("{DEPLOYS}/d/scale"),
        None,
        Some(PB),
        "",
    )
    .await;
    let scale = protobuf::decode_enveloped(&r.body, "", "").unwrap();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 3);
}

#[tokio::test]
async fn bad_protobuf_bodies() {
    let s = server().await;
    let path = "/api/v1/namespaces/default/configmaps";
    let r = call(&s, Method::POST, path, Some(PB), None, "{}").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("does not appear to be a protobuf message"),
        "{}",
        r.json()
    );
    let mut truncated = envelope(
        "v1",
        "ConfigMap",
        core::ConfigMap {
            metadata: Some(go_meta("c", &[])),
            ..Default::default()
        },
    );
    truncated.truncate(truncated.len() - 8);
    let r = call(&s, Method::POST, path, Some(PB), None, truncated).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // A kind that does not match the URL, as for JSON.
    let r = call(
        &s,
        Method::POST,
        path,
        Some(PB),
        None,
        envelope("v1", "Secret", core::Secret::default()),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .starts_with("Secret in version \"v1\" cannot be handled as a ConfigMap"),
    );
}

#[tokio::test]
async fn kubectl_auth_can_i() {
    let s = server().await;
    let review = authz::SelfSubjectAccessReview {
        metadata: Some(go_meta("", &[])),
        spec: Some(authz::SelfSubjectAccessReviewSpec {
            resource_attributes: Some(authz::ResourceAttributes {
                namespace: st("default"),
                verb: st("get"),
                group: st(""),
                version: st(""),
                resource: st("pods"),
                subresource: st(""),
                name: st(""),
                ..Default::default()
            }),
            non_resource_attributes: None,
        }),
        status: Some(authz::SubjectAccessReviewStatus {
            allowed: Some(false),
            denied: Some(false),
            reason: st(""),
            evaluation_error: st(""),
        }),
    };
    let path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let r = call(
        &s,
        Method::POST,
        path,
        Some(PB),
        Some(PB_OR_JSON),
        envelope(
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview",
            review.clone(),
        ),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let v = r.json();
    assert_eq!(v["status"]["allowed"], true);
    assert_eq!(v["spec"]["resourceAttributes"]["resource"], "pods");
    // Protobuf in, protobuf out.
    let r = call(
        &s,
        Method::POST,
        path,
        Some(PB),
        Some(PB),
        envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview", review),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let out = authz::SelfSubjectAccessReview::decode(
        Unknown::decode(&r.body[4..])
            .unwrap()
            .raw
            .as_deref()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(out.status.unwrap().allowed, Some(true));
    // Exactly one of the attribute kinds.
    let r = s
        .post(
            path,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        r.json()["message"].as_str().unwrap().contains(
            "exactly one of nonResourceAttributes or resourceAttributes must be specified"
        )
    );
    // Not a stored resource.
    let r = s.get(path).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    // Rules: everything.
    let r = s
        .post(
            "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": "default"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(
        r.json()["status"]["resourceRules"][0]["verbs"],
        json!(["*"])
    );
    // Discovery lists the group with create only.
    let v = s.get("/apis/authorization.k8s.io/v1").await.json();
    let ssar = v["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "selfsubjectaccessreviews")
        .unwrap();
    assert_eq!(ssar["verbs"], json!(["create"]));
}

#[tokio::test]
async fn duplicate_fields() {
    let s = server().await;
    let path = "/api/v1/namespaces/default/configmaps";
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","name":"a","labels":{"x":"1","x":"2"}},"data":{"k":"v"},"data":{"k":"w"}}"#;
    let r = s
        .call(
            Method::POST,
            &format!("{path}?fieldValidation=Strict"),
            Some("application/json"),
            body,
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json()["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: duplicate field \"metadata.name\", duplicate field \"metadata.labels.x\", duplicate field \"data\""
    );
    let r = s
        .call(
            Method::POST,
            &format!("{path}?fieldValidation=Warn"),
            Some("application/json"),
            body,
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let warnings: Vec<&str> = r
        .headers
        .get_all(header::WARNING)
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(
        warnings,
        [
            "299 - \"duplicate field \\\"metadata.name\\\"\"",
            "299 - \"duplicate field \\\"metadata.labels.x\\\"\"",
            "299 - \"duplicate field \\\"data\\\"\"",
        ]
    );
    // The last value wins, as in Go.
    assert_eq!(r.json()["data"]["k"], "w");
    assert_eq!(r.json()["metadata"]["labels"]["x"], "2");
    let r = s
        .call(
            Method::POST,
            &format!("{path}?fieldValidation=Ignore"),
            Some("application/json"),
            body.replace("\"a\"", "\"b\""),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert!(r.headers.get(header::WARNING).is_none());
    // Unknown and duplicate fields together.
    let r = s
        .call(
            Method::POST,
            &format!("{path}?fieldValidation=Strict"),
            Some("application/json"),
            r#"{"metadata":{"name":"c"},"bogus":1,"data":{},"data":{}}"#,
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json()["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"bogus\", duplicate field \"data\""
    );
}

#[tokio::test]
async fn protobuf_delete_options_and_updates() {
    let s = server().await;
    let path = "/api/v1/namespaces/default/configmaps";
    let r = s
        .post(
            path,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "finalizers": ["x/y"]}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let rv = r.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    // An update (PUT) in protobuf, with the resourceVersion precondition.
    let mut meta = go_meta("a", &[("k", "v")]);
    meta.resource_version = Some(rv);
    meta.finalizers = vec!["x/y".into()];
    let cm = core::ConfigMap {
        metadata: Some(meta),
        data: [("k".into(), "2".into())].into(),
        ..Default::default()
    };
    let r = call(
        &s,
        Method::PUT,
        &format!("{path}/a"),
        Some(PB),
        Some(PB),
        envelope("v1", "ConfigMap", cm),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let v = protobuf::decode_enveloped(&r.body, "", "").unwrap();
    assert_eq!(v["data"]["k"], "2");
    assert_eq!(v["metadata"]["labels"]["k"], "v");
    // DeleteOptions in protobuf, as client-go's typed clients send them.
    let opts = meta::DeleteOptions {
        grace_period_seconds: Some(0),
        propagation_policy: st("Foreground"),
        ..Default::default()
    };
    let r = call(
        &s,
        Method::DELETE,
        &format!("{path}/a"),
        Some(PB),
        Some(PB_OR_JSON),
        envelope("meta.k8s.io/v1", "DeleteOptions", opts),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    let v = r.json();
    // The finalizer holds the object; Foreground adds its own.
    assert!(v["metadata"]["deletionTimestamp"].is_string());
    assert!(
        v["metadata"]["finalizers"]
            .as_array()
            .unwrap()
            .contains(&json!("foregroundDeletion"))
    );
}
