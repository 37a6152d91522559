//! The dashboard's files are served to anyone, even with anonymous requests turned off (a
//! browser cannot attach a token to a navigation, so the login page must load first), while
//! the API it reads answers only with credentials. The RBAC manifest it serves gives its
//! ServiceAccount what its pages read, and no Secrets and no writes.

use std::time::Duration;

use http::{Request, StatusCode};
use serde_json::{Value, json};
use testkit::{Backend, InProcess, eventually, with_rbac};

const ACCOUNT: &str = "system:serviceaccount:kube-system:minik8s-dashboard";

async fn anonymous_get(s: &InProcess, path: &str) -> testkit::Reply {
    let req = Request::get(path)
        .body(axum::body::Body::empty())
        .expect("request");
    s.send_as(None, req).await
}

#[tokio::test]
async fn the_page_loads_without_credentials_but_the_api_does_not() {
    let s = InProcess::start_with(Backend::Sqlite, |c| {
        with_rbac(c);
        c.serve.anonymous_auth = Some(false);
    })
    .await
    .unwrap();
    let page = anonymous_get(&s, "/dashboard/").await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(page.headers["content-type"], "text/html; charset=utf-8");
    assert!(
        page.headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("connect-src 'self'")
    );
    let script = anonymous_get(&s, "/dashboard/js/app.js").await;
    assert_eq!(script.status, StatusCode::OK);
    let api = anonymous_get(&s, "/api/v1/namespaces").await;
    assert_eq!(api.status, StatusCode::UNAUTHORIZED);
    // Outside the dashboard's prefix nothing new is served.
    assert_eq!(
        anonymous_get(&s, "/dashboardx").await.status,
        StatusCode::UNAUTHORIZED
    );
}

/// Whether the dashboard's account may do `attributes` (a SubjectAccessReview's).
async fn allowed(s: &InProcess, attributes: Value) -> bool {
    let r = s
        .post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            json!({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": ACCOUNT,
                    "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
                    "resourceAttributes": attributes,
                },
            }),
        )
        .await;
    assert!(
        r.status.is_success(),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    r.json()["status"]["allowed"] == true
}

#[tokio::test]
async fn the_served_rbac_manifest_grants_what_the_pages_read() {
    let s = InProcess::start_with(Backend::Sqlite, with_rbac)
        .await
        .unwrap();
    let manifest = s.get("/dashboard/rbac.yaml").await;
    assert_eq!(manifest.status, StatusCode::OK);
    let text = String::from_utf8(manifest.body.to_vec()).unwrap();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let obj: Value = serde::Deserialize::deserialize(doc).unwrap();
        let path = match obj["kind"].as_str().unwrap() {
            "ServiceAccount" => "/api/v1/namespaces/kube-system/serviceaccounts",
            "ClusterRole" => "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            "ClusterRoleBinding" => "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            other => panic!("unexpected {other} in the manifest"),
        };
        let r = s.post(path, obj).await;
        assert!(
            r.status.is_success(),
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    eventually(Duration::from_secs(20), "the binding in effect", || async {
        allowed(&s, json!({"verb": "list", "resource": "nodes"}))
            .await
            .then_some(())
    })
    .await;
    let reads = [
        json!({"verb": "watch", "resource": "pods"}),
        json!({"verb": "get", "resource": "pods", "subresource": "log", "namespace": "default", "name": "p"}),
        json!({"verb": "watch", "resource": "events", "namespace": "default"}),
        json!({"verb": "list", "group": "apps", "resource": "deployments"}),
        json!({"verb": "watch", "group": "batch", "resource": "cronjobs"}),
        json!({"verb": "list", "group": "discovery.k8s.io", "resource": "endpointslices"}),
        json!({"verb": "watch", "group": "functions.minik8s.io", "resource": "workflowruns"}),
        json!({"verb": "watch", "group": "serving.knative.dev", "resource": "revisions"}),
        json!({"verb": "list", "group": "metrics.k8s.io", "resource": "pods"}),
        json!({"verb": "list", "group": "metrics.k8s.io", "resource": "nodes"}),
        json!({"verb": "get", "resource": "services", "subresource": "proxy", "namespace": "monitoring", "name": "http:prometheus:9090"}),
        json!({"verb": "create", "group": "authentication.k8s.io", "resource": "selfsubjectreviews"}),
    ];
    for a in reads {
        assert!(allowed(&s, a.clone()).await, "not allowed: {a}");
    }
    let denied = [
        json!({"verb": "list", "resource": "secrets"}),
        json!({"verb": "get", "resource": "secrets", "namespace": "kube-system", "name": "x"}),
        json!({"verb": "create", "resource": "pods", "namespace": "default"}),
        json!({"verb": "delete", "group": "apps", "resource": "deployments", "namespace": "default", "name": "d"}),
        json!({"verb": "create", "resource": "pods", "subresource": "exec", "namespace": "default", "name": "p"}),
        json!({"verb": "get", "resource": "services", "subresource": "proxy", "namespace": "default", "name": "http:other:80"}),
    ];
    for a in denied {
        assert!(!allowed(&s, a.clone()).await, "allowed: {a}");
    }
}
