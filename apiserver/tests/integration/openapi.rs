//! The OpenAPI endpoints through the whole router (authentication included), without sockets.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use http::{Request, StatusCode, header};
use minik8s_api::ResourceInfo;
use minik8s_apiserver::auth::ClientCertIdentity;
use minik8s_apiserver::handlers::openapi::{Gvk, KindSchema, group_version_document};
use serde_json::{Value, json};
use testkit::{Backend, InProcess, Reply};
use tower::ServiceExt;

async fn server() -> InProcess {
    InProcess::start(Backend::Sqlite).await.unwrap()
}

/// A GET with extra headers; `admin: false` sends it without any identity.
async fn get_with(s: &InProcess, uri: &str, headers: &[(&str, &str)], admin: bool) -> Reply {
    let mut req = Request::get(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut req = req.body(Body::empty()).unwrap();
    if admin {
        req.extensions_mut()
            .insert(ClientCertIdentity(testkit::admin()));
    }
    let resp = s.router.clone().oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: http_body_util::BodyExt::collect(body)
            .await
            .unwrap()
            .to_bytes(),
    }
}

async fn get_json(s: &InProcess, uri: &str) -> Value {
    let r = s.get(uri).await;
    assert_eq!(r.status, StatusCode::OK, "GET {uri}");
    assert_eq!(r.headers[header::CONTENT_TYPE], "application/json");
    r.json()
}

/// Every `$ref` in `v`, so tests can check each resolves inside the document.
fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                if let ("$ref", Some(r)) = (k.as_str(), v.as_str()) {
                    out.push(r.to_string());
                } else {
                    // Includes JSONSchemaProps' own property named `$ref`.
                    refs(v, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

fn assert_refs_resolve(doc: &Value) {
    let mut all = Vec::new();
    refs(doc, &mut all);
    assert!(!all.is_empty());
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for r in all {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("{r} is not a components ref"));
        assert!(schemas.contains_key(name), "{r} does not resolve");
    }
}

/// The operation on `path` for `method`, with its query parameter names.
fn op<'a>(doc: &'a Value, path: &str, method: &str) -> &'a Value {
    let op = &doc["paths"][path][method];
    assert!(op.is_object(), "no {method} on {path}");
    op
}

fn query_params(op: &Value) -> Vec<&str> {
    op["parameters"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter(|p| p["in"] == "query")
                .map(|p| p["name"].as_str().unwrap())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn index_lists_served_group_versions() {
    let s = server().await;
    let index = get_json(&s, "/openapi/v3").await;
    let paths = index["paths"].as_object().unwrap();
    for gv in [
        "api/v1",
        "apis/apps/v1",
        "apis/batch/v1",
        "apis/autoscaling/v2",
        "apis/autoscaling/v1",
    ] {
        let url = paths[gv]["serverRelativeURL"].as_str().unwrap();
        let (path, hash) = url.split_once("?hash=").unwrap();
        assert_eq!(path, format!("/openapi/v3/{gv}"));
        assert_eq!(hash.len(), 128, "sha512 hex");
        assert!(
            hash.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase())
        );
    }
    assert!(!paths.contains_key("apis/apps/v1beta1"));
}

#[tokio::test]
async fn core_document_describes_pods() {
    let s = server().await;
    let index = get_json(&s, "/openapi/v3").await;
    let url = index["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let doc = get_json(&s, &url).await;
    assert_eq!(doc["openapi"], "3.0.0");
    assert_eq!(doc["info"]["title"], "Kubernetes");
    assert_eq!(doc["info"]["version"], "v1.32.4");
    let schemas = &doc["components"]["schemas"];
    let pod = &schemas["io.k8s.api.core.v1.Pod"];
    assert_eq!(
        pod["x-kubernetes-group-version-kind"],
        json!([{"group": "", "kind": "Pod", "version": "v1"}])
    );
    assert_eq!(
        pod["properties"]["spec"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.PodSpec"
    );
    assert_eq!(
        schemas["io.k8s.api.core.v1.PodList"]["x-kubernetes-group-version-kind"],
        json!([{"group": "", "kind": "PodList", "version": "v1"}])
    );
    assert!(schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object());
    // Upstream's patch and list extensions, which k8s-openapi's schemas lack.
    let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    assert_eq!(containers["x-kubernetes-list-type"], "map");
    assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
    assert_eq!(
        schemas["io.k8s.api.core.v1.Container"]["properties"]["ports"]["x-kubernetes-list-map-keys"],
        json!(["containerPort", "protocol"])
    );
    assert_eq!(
        schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["format"],
        "int-or-string"
    );
    assert_refs_resolve(&doc);

    // Operations, named and marked as upstream's.
    let item = "/api/v1/namespaces/{namespace}/pods/{name}";
    let patch = op(&doc, item, "patch");
    assert_eq!(patch["operationId"], "patchCoreV1NamespacedPod");
    assert_eq!(patch["x-kubernetes-action"], "patch");
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        json!({"group": "", "kind": "Pod", "version": "v1"})
    );
    let params = query_params(patch);
    for p in ["dryRun", "fieldManager", "fieldValidation", "force"] {
        assert!(params.contains(&p), "patch lacks {p}: {params:?}");
    }
    let media: Vec<&String> = patch["requestBody"]["content"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    for m in [
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
    ] {
        assert!(media.iter().any(|x| *x == m), "patch lacks {m}");
    }
    for (method, params) in [
        ("put", item),
        ("post", "/api/v1/namespaces/{namespace}/pods"),
    ] {
        let o = op(&doc, params, method);
        let q = query_params(o);
        assert!(
            q.contains(&"fieldValidation") && q.contains(&"dryRun"),
            "{method}: {q:?}"
        );
    }
    let list = op(&doc, "/api/v1/namespaces/{namespace}/pods", "get");
    assert_eq!(list["x-kubernetes-action"], "list");
    assert_eq!(
        list["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.PodList"
    );
    assert_eq!(
        op(&doc, "/api/v1/pods", "get")["operationId"],
        "listCoreV1PodForAllNamespaces"
    );
    assert_eq!(
        op(
            &doc,
            "/api/v1/namespaces/{namespace}/pods/{name}/status",
            "put"
        )["operationId"],
        "replaceCoreV1NamespacedPodStatus"
    );
    let binding = op(
        &doc,
        "/api/v1/namespaces/{namespace}/pods/{name}/binding",
        "post",
    );
    assert_eq!(
        binding["x-kubernetes-group-version-kind"],
        json!({"group": "", "kind": "Binding", "version": "v1"})
    );
    // Cluster-scoped kinds, and verbs the table does not allow are left out.
    assert_eq!(
        op(&doc, "/api/v1/namespaces/{name}", "get")["operationId"],
        "readCoreV1Namespace"
    );
    assert_eq!(
        op(&doc, "/api/v1/namespaces/{name}/finalize", "put")["operationId"],
        "replaceCoreV1NamespaceFinalize"
    );
    assert!(doc["paths"]["/api/v1/nodes"]["delete"].is_object());
    // What kubelets serve through the API server, shaped as upstream's.
    let exec = op(
        &doc,
        "/api/v1/namespaces/{namespace}/pods/{name}/exec",
        "post",
    );
    assert_eq!(exec["operationId"], "connectCoreV1PostNamespacedPodExec");
    assert_eq!(exec["x-kubernetes-action"], "connect");
    assert_eq!(
        exec["x-kubernetes-group-version-kind"],
        json!({"group": "", "kind": "PodExecOptions", "version": "v1"})
    );
    let log = op(
        &doc,
        "/api/v1/namespaces/{namespace}/pods/{name}/log",
        "get",
    );
    assert_eq!(log["operationId"], "readCoreV1NamespacedPodLog");
    assert_eq!(
        log["responses"]["200"]["content"]["text/plain"]["schema"]["type"],
        "string"
    );
    let log_params: Vec<&str> =
        doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/log"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
    assert!(log_params.contains(&"tailLines") && log_params.contains(&"follow"));
    assert_eq!(
        op(
            &doc,
            "/api/v1/namespaces/{namespace}/pods/{name}/portforward",
            "get"
        )["operationId"],
        "connectCoreV1GetNamespacedPodPortforward"
    );
    assert_eq!(
        op(&doc, "/api/v1/nodes/{name}/proxy/{path}", "put")["operationId"],
        "connectCoreV1PutNodeProxyWithPath"
    );
    assert!(doc["paths"]["/apis/apps/v1/deployments"].is_null());
}

#[tokio::test]
async fn apps_document_describes_deployments_and_scale() {
    let s = server().await;
    let doc = get_json(&s, "/openapi/v3/apis/apps/v1").await;
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["io.k8s.api.apps.v1.Deployment"]["x-kubernetes-group-version-kind"],
        json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])
    );
    assert_eq!(
        schemas["io.k8s.api.autoscaling.v1.Scale"]["x-kubernetes-group-version-kind"],
        json!([{"group": "autoscaling", "kind": "Scale", "version": "v1"}])
    );
    assert!(
        schemas["io.k8s.api.core.v1.Pod"].is_null(),
        "only reachable schemas"
    );
    assert!(schemas["io.k8s.api.core.v1.PodTemplateSpec"].is_object());
    let scale = op(
        &doc,
        "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale",
        "patch",
    );
    assert_eq!(scale["operationId"], "patchAppsV1NamespacedDeploymentScale");
    assert_eq!(
        scale["x-kubernetes-group-version-kind"],
        json!({"group": "autoscaling", "kind": "Scale", "version": "v1"})
    );
    assert_eq!(
        op(
            &doc,
            "/apis/apps/v1/namespaces/{namespace}/deployments",
            "delete"
        )["operationId"],
        "deleteAppsV1CollectionNamespacedDeployment"
    );
    assert_refs_resolve(&doc);

    let rbac = get_json(&s, "/openapi/v3/apis/rbac.authorization.k8s.io/v1").await;
    assert_eq!(
        op(
            &rbac,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            "get"
        )["operationId"],
        "listRbacAuthorizationV1ClusterRole"
    );
    assert_refs_resolve(&rbac);
}

#[tokio::test]
async fn every_document_resolves_and_marks_patch_operations() {
    let s = server().await;
    let index = get_json(&s, "/openapi/v3").await;
    for (gv, entry) in index["paths"].as_object().unwrap() {
        let doc = get_json(&s, entry["serverRelativeURL"].as_str().unwrap()).await;
        assert_refs_resolve(&doc);
        // kubectl finds a kind's PATCH operation by its GVK to learn what the server supports.
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let patched: Vec<&Value> = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .filter_map(|p| p.get("patch"))
            // Connect operations (nodes/proxy) carry their options kind, as upstream's.
            .filter(|p| p["x-kubernetes-action"] != "connect")
            .collect();
        // authorization.k8s.io and authentication.k8s.io serve only reviews, which are
        // created and never patched; metrics.k8s.io is read-only, as metrics-server's.
        let unpatchable = [
            "apis/authorization.k8s.io/v1",
            "apis/authentication.k8s.io/v1",
            "apis/metrics.k8s.io/v1beta1",
        ];
        if !unpatchable.contains(&gv.as_str()) {
            assert!(!patched.is_empty(), "{gv} has no patch operation");
        }
        for p in patched {
            let gvk = &p["x-kubernetes-group-version-kind"];
            let kind_schema = schemas.values().find(|s| {
                s["x-kubernetes-group-version-kind"]
                    .as_array()
                    .is_some_and(|l| l.contains(gvk))
            });
            assert!(kind_schema.is_some(), "{gv}: no schema for {gvk}");
        }
    }
}

#[tokio::test]
async fn caching_by_hash() {
    let s = server().await;
    let index = get_json(&s, "/openapi/v3").await;
    let url = index["paths"]["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let hash = url.split_once("?hash=").unwrap().1.to_string();
    let r = s.get(&url).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.headers[header::CACHE_CONTROL]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
    assert_eq!(r.headers[header::ETAG], format!("\"{hash}\""));
    // The index is stable: the same hash on every request.
    assert_eq!(get_json(&s, "/openapi/v3").await, index);
    let r = s.get("/openapi/v3/apis/apps/v1?hash=0BAD").await;
    assert_eq!(r.status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(r.headers[header::LOCATION], url.as_str());
    let etag = format!("\"{hash}\"");
    let r = get_with(
        &s,
        "/openapi/v3/apis/apps/v1",
        &[("if-none-match", etag.as_str())],
        true,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_MODIFIED);
    let r = get_with(
        &s,
        "/openapi/v3/apis/apps/v1",
        &[(
            "accept",
            "application/com.github.proto-openapi.spec.v3@v1.0+protobuf",
        )],
        true,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(
        s.get("/openapi/v3/apis/nope/v1").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn v2_is_an_empty_protobuf_document() {
    let s = server().await;
    // Asked for as kubectl asks, answered as upstream answers (Go's parser rejects the `@`).
    let r = get_with(
        &s,
        "/openapi/v2",
        &[(
            "accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )],
        true,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.headers[header::CONTENT_TYPE],
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    assert!(r.body.starts_with(b"\x0a\x032.0"));
    // As JSON there is nothing: the documents are v3.
    let r = s.get("/openapi/v2").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let status = r.json();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["code"], 404);
}

#[tokio::test]
async fn requires_authentication() {
    let s = server().await;
    let r = get_with(&s, "/openapi/v3", &[], false).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}

/// The documents list `fieldValidation` on writes, so kubectl sends `fieldValidation=Strict`
/// and does no client-side check: the server must find unknown fields itself.
#[tokio::test]
async fn unknown_fields_follow_field_validation() {
    let s = server().await;
    let pods = "/api/v1/namespaces/default/pods";
    let pod = |name: &str| {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": "busybox", "imagee": "busybox"}]},
        })
    };
    let r = s
        .post(&format!("{pods}?fieldValidation=Strict"), pod("strict"))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json()["message"],
        "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"spec.containers[0].imagee\""
    );
    // Warn is the default: the object is created, the client is told.
    let r = s.post(pods, pod("warned")).await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(
        r.headers[header::WARNING],
        "299 - \"unknown field \\\"spec.containers[0].imagee\\\"\""
    );
    let r = s
        .post(&format!("{pods}?fieldValidation=Ignore"), pod("ignored"))
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert!(r.headers.get(header::WARNING).is_none());
    let r = s
        .post(&format!("{pods}?fieldValidation=Sometimes"), pod("bad"))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Patches are checked on the patched object; known fields pass.
    let merge = "application/merge-patch+json";
    let r = s
        .patch(
            &format!("{pods}/warned?fieldValidation=Strict"),
            merge,
            json!({"spec": {"bogus": true}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = s
        .patch(
            &format!("{pods}/warned?fieldValidation=Strict"),
            merge,
            json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["metadata"]["labels"]["a"], "b");
    assert!(r.headers.get(header::WARNING).is_none());
}

/// A kind whose schema arrives at run time (as a CRD's openAPIV3Schema will).
#[test]
fn runtime_schemas() {
    let info = ResourceInfo {
        group: "stable.example.com".into(),
        version: "v1".into(),
        kind: "CronTab".into(),
        list_kind: "CronTabList".into(),
        plural: "crontabs".into(),
        singular: "crontab".into(),
        namespaced: true,
        short_names: vec![],
        categories: vec![],
        verbs: minik8s_api::registry::ALL_VERBS
            .iter()
            .map(|s| s.to_string())
            .collect(),
        subresources: vec![],
        name_rule: minik8s_api::validation::NameRule::Dns1123Subdomain,
    };
    let schema = json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"cronSpec": {"type": "string"}}}},
    });
    let mut schemas = BTreeMap::new();
    schemas.insert(
        Gvk::new("stable.example.com", "v1", "CronTab"),
        KindSchema::Json(Arc::new(schema)),
    );
    let doc = group_version_document("stable.example.com", "v1", &[info], &schemas);
    let s = &doc["components"]["schemas"]["com.example.stable.v1.CronTab"];
    assert_eq!(
        s["x-kubernetes-group-version-kind"],
        json!([{"group": "stable.example.com", "kind": "CronTab", "version": "v1"}])
    );
    assert_eq!(
        s["properties"]["spec"]["properties"]["cronSpec"]["type"],
        "string"
    );
    assert_eq!(
        s["properties"]["metadata"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert_eq!(
        op(
            &doc,
            "/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}",
            "patch"
        )["operationId"],
        "patchStableExampleComV1NamespacedCronTab"
    );
    assert!(doc["components"]["schemas"]["com.example.stable.v1.CronTabList"].is_object());
    assert_refs_resolve(&doc);
}
