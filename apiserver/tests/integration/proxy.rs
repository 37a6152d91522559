//! `services/proxy` and `pods/proxy`: requests reach a small HTTP server this test runs on
//! loopback, as the pod behind a Service's EndpointSlice and as a pod with that pod IP. The
//! pod IP is a pod-network address (upstream refuses to proxy to loopback ones); the server's
//! cluster dialer, as an egress selector would, takes connections to it to the test's
//! loopback server, and refuses every other address, so nothing leaves the machine.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use http::{Method, StatusCode, header};
use minik8s_apiserver::auth::UserInfo;
use minik8s_apiserver::proxy_transport::ClusterDialer;
use serde_json::{Value, json};
use testkit::{Backend, InProcess, eventually};
use tokio::net::TcpStream;

const POD_IP: &str = "10.244.99.7";
/// A pod IP nothing answers on: the dialer refuses it.
const GONE_IP: &str = "10.244.99.8";
const NS: &str = "/api/v1/namespaces/default";

/// Connections to [`POD_IP`] go to the test server on loopback; others are refused.
struct ToLoopback {
    port: u16,
}

impl ClusterDialer for ToLoopback {
    fn dial(&self, addr: SocketAddr) -> BoxFuture<'static, std::io::Result<TcpStream>> {
        let known = addr.ip() == POD_IP.parse::<IpAddr>().unwrap() && addr.port() == self.port;
        Box::pin(async move {
            if !known {
                return Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
            }
            TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, addr.port())).await
        })
    }
}

/// Answers with what it was sent; `/status/<code>` answers that code, `/redirect` a 302.
async fn echo(req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    if path == "/redirect" {
        return (StatusCode::FOUND, [(header::LOCATION, "/target?a=b")]).into_response();
    }
    let code = path
        .strip_prefix("/status/")
        .and_then(|c| c.parse::<u16>().ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(StatusCode::OK);
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let answer = json!({
        "method": parts.method.as_str(),
        "path": path,
        "query": parts.uri.query(),
        "body": String::from_utf8_lossy(&body),
        "test": header("x-test"),
        "host": header("host"),
        "forwardedUri": header("x-forwarded-uri"),
        "connection": header("connection"),
    });
    (
        code,
        [("x-backend", "echo"), ("access-control-allow-origin", "*")],
        answer.to_string(),
    )
        .into_response()
}

async fn backend() -> u16 {
    let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().fallback(echo);
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

async fn created(api: &InProcess, path: &str, body: Value) {
    let r = api.post(path, body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{path}: {}", r.json());
}

async fn pod(api: &InProcess, name: &str, ip: &str, port: Option<u16>) {
    let mut container = json!({"name": "c", "image": "busybox"});
    if let Some(p) = port {
        container["ports"] = json!([{"containerPort": p}]);
    }
    created(
        api,
        &format!("{NS}/pods"),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
               "spec": {"containers": [container]}}),
    )
    .await;
    let r = api
        .patch(
            &format!("{NS}/pods/{name}/status"),
            "application/merge-patch+json",
            json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json());
}

async fn service(api: &InProcess, name: &str, port: u16, endpoints: Value) {
    created(
        api,
        &format!("{NS}/services"),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
               "spec": {"ports": [{"name": "http", "port": 80, "targetPort": port}]}}),
    )
    .await;
    if endpoints.as_array().is_some_and(|e| !e.is_empty()) {
        created(
            api,
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": format!("{name}-1"),
                                "labels": {"kubernetes.io/service-name": name}},
                   "addressType": "IPv4",
                   "endpoints": endpoints,
                   "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}),
        )
        .await;
    }
}

async fn send(api: &InProcess, method: Method, path: &str, body: &str) -> testkit::Reply {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("x-test", "passed")
        .header(header::CONNECTION, "keep-alive")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    api.send(req).await
}

fn status(r: &testkit::Reply) -> (u16, String, String) {
    let v = r.json();
    (
        r.status.as_u16(),
        v["reason"].as_str().unwrap_or_default().to_string(),
        v["message"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test]
async fn services_and_pods_proxy() {
    let api = InProcess::start_with(Backend::Sqlite, testkit::with_rbac)
        .await
        .unwrap();
    let port = backend().await;
    assert!(
        api.server
            .cluster_dialer
            .set(Arc::new(ToLoopback { port }))
            .is_ok()
    );
    pod(&api, "web", POD_IP, Some(port)).await;
    let to_web = json!([{"addresses": [POD_IP], "conditions": {"ready": true},
                         "targetRef": {"kind": "Pod", "namespace": "default", "name": "web"}}]);
    service(&api, "web", port, to_web).await;

    // Through the Service, by port number and by port name, with a scheme or without.
    for id in ["web:80", "web:http", "http:web:80", "http:web:http"] {
        let path = format!("{NS}/services/{id}/proxy/echo/a?x=1&y=two");
        let r = send(&api, Method::GET, &path, "").await;
        assert_eq!(r.status, StatusCode::OK, "{id}: {:?}", r.body);
        let v = r.json();
        assert_eq!(v["method"], "GET");
        assert_eq!(v["path"], "/echo/a");
        assert_eq!(v["query"], "x=1&y=two");
        assert_eq!(v["test"], "passed");
        assert_eq!(v["host"], format!("{POD_IP}:{port}"));
        assert_eq!(
            v["forwardedUri"],
            format!("{NS}/services/{id}/proxy/echo/a")
        );
        // Hop-by-hop headers stop here, both ways; the pod's CORS headers too.
        assert_ne!(v["connection"], "keep-alive");
        assert_eq!(r.headers["x-backend"], "echo");
        assert!(!r.headers.contains_key("access-control-allow-origin"));
    }
    // Every method, with its body.
    for method in ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"] {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let r = send(
            &api,
            method.clone(),
            &format!("{NS}/services/web/proxy/m"),
            "",
        )
        .await;
        // The Service's only port is named: a bare name finds no endpoint port.
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{method}");
        let path = format!("{NS}/services/web:http/proxy/m/");
        let r = send(&api, method.clone(), &path, "some body").await;
        assert_eq!(r.status, StatusCode::OK, "{method}: {:?}", r.body);
        let v = r.json();
        assert_eq!(v["method"], method.as_str());
        assert_eq!(v["path"], "/m/");
        assert_eq!(v["body"], "some body");
    }
    let r = send(
        &api,
        Method::HEAD,
        &format!("{NS}/services/web:80/proxy/h"),
        "",
    )
    .await;
    assert_eq!((r.status, r.body.len()), (StatusCode::OK, 0));
    // The pod's status and body come back as they are.
    let r = send(
        &api,
        Method::GET,
        &format!("{NS}/services/web:80/proxy/status/418"),
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::IM_A_TEAPOT);
    assert_eq!(r.json()["path"], "/status/418");
    let r = send(
        &api,
        Method::GET,
        &format!("{NS}/services/web:80/proxy/status/500"),
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    // Redirects are not followed; their location stays under the proxy.
    let r = send(
        &api,
        Method::GET,
        &format!("{NS}/services/web:80/proxy/redirect"),
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::FOUND);
    assert_eq!(
        r.headers[header::LOCATION],
        format!("{NS}/services/web:80/proxy/target?a=b").as_str()
    );
    // The bare proxy path is sent to the one with a slash.
    let r = send(
        &api,
        Method::GET,
        &format!("{NS}/services/web:80/proxy?q=1"),
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(
        r.headers[header::LOCATION],
        format!("{NS}/services/web:80/proxy/?q=1").as_str()
    );

    // Straight to the pod: its first declared port, or the one named.
    for id in [
        "web".to_string(),
        format!("web:{port}"),
        format!("http:web:{port}"),
    ] {
        let r = send(
            &api,
            Method::POST,
            &format!("{NS}/pods/{id}/proxy/p?z=3"),
            "b",
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{id}: {:?}", r.body);
        let v = r.json();
        assert_eq!(
            (v["method"].as_str(), v["path"].as_str()),
            (Some("POST"), Some("/p"))
        );
        assert_eq!(
            (v["query"].as_str(), v["body"].as_str()),
            (Some("z=3"), Some("b"))
        );
    }

    // Errors, with upstream's codes and messages.
    service(&api, "empty", port, json!([])).await;
    let unavailable = |name: &str| {
        (
            503,
            "ServiceUnavailable".to_string(),
            format!("no endpoints available for service \"{name}\""),
        )
    };
    let r = send(
        &api,
        Method::GET,
        &format!("{NS}/services/empty/proxy/"),
        "",
    )
    .await;
    assert_eq!(status(&r), unavailable("empty"));
    let r = send(
        &api,
        Method::GET,
        &format!("{NS}/services/web:81/proxy/"),
        "",
    )
    .await;
    assert_eq!(
        status(&r),
        (
            503,
            "ServiceUnavailable".into(),
            "no service port 81 found for service \"web\"".into()
        )
    );
    // Endpoints that are not a pod with that IP are never used (a Service without a
    // selector, or a stale slice).
    let external = json!([{"addresses": [POD_IP], "conditions": {"ready": true}}]);
    service(&api, "external", port, external).await;
    let r = send(
        &api,
        Method::GET,
        &format!("{NS}/services/external:80/proxy/"),
        "",
    )
    .await;
    assert_eq!(status(&r), unavailable("external:80"));
    let stale = json!([{"addresses": [GONE_IP], "conditions": {"ready": true},
                        "targetRef": {"kind": "Pod", "namespace": "default", "name": "web"}}]);
    service(&api, "stale", port, stale).await;
    let r = send(
        &api,
        Method::GET,
        &format!("{NS}/services/stale:80/proxy/"),
        "",
    )
    .await;
    assert_eq!(status(&r), unavailable("stale:80"));
    let unready = json!([{"addresses": [POD_IP], "conditions": {"ready": false},
                          "targetRef": {"kind": "Pod", "namespace": "default", "name": "web"}}]);
    service(&api, "unready", port, unready).await;
    let r = send(
        &api,
        Method::GET,
        &format!("{NS}/services/unready:80/proxy/"),
        "",
    )
    .await;
    assert_eq!(status(&r), unavailable("unready:80"));

    let r = send(
        &api,
        Method::GET,
        &format!("{NS}/services/missing/proxy/"),
        "",
    )
    .await;
    assert_eq!(
        status(&r),
        (
            404,
            "NotFound".into(),
            "services \"missing\" not found".into()
        )
    );
    let r = send(&api, Method::GET, &format!("{NS}/pods/missing/proxy/"), "").await;
    assert_eq!(
        status(&r),
        (404, "NotFound".into(), "pods \"missing\" not found".into())
    );
    let r = send(
        &api,
        Method::GET,
        &format!("{NS}/services/ftp:web:80/proxy/"),
        "",
    )
    .await;
    assert_eq!(
        status(&r),
        (
            400,
            "BadRequest".into(),
            "invalid service request \"ftp:web:80\"".into()
        )
    );
    let r = send(&api, Method::GET, &format!("{NS}/pods/a:b:c:d/proxy/"), "").await;
    assert_eq!(
        status(&r),
        (
            400,
            "BadRequest".into(),
            "invalid pod request \"a:b:c:d\"".into()
        )
    );
    // A pod without an IP, or with a loopback one, is not proxied to.
    created(
        &api,
        &format!("{NS}/pods"),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pending"},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    )
    .await;
    let r = send(
        &api,
        Method::GET,
        &format!("{NS}/pods/pending:80/proxy/"),
        "",
    )
    .await;
    assert_eq!(
        status(&r),
        (400, "BadRequest".into(), "address not allowed".into())
    );
    pod(&api, "local", "127.0.0.1", Some(port)).await;
    let r = send(&api, Method::GET, &format!("{NS}/pods/local/proxy/"), "").await;
    assert_eq!(status(&r).0, 400);
    // A pod nothing answers for.
    pod(&api, "gone", GONE_IP, Some(port)).await;
    let r = send(&api, Method::GET, &format!("{NS}/pods/gone/proxy/"), "").await;
    let (code, reason, message) = status(&r);
    assert_eq!((code, reason.as_str()), (503, "ServiceUnavailable"));
    assert!(
        message.starts_with("error trying to reach service: dial tcp 10.244.99.8:"),
        "{message}"
    );

    // Authorization: `get` on services/proxy (pods/proxy), not on services.
    let alice = UserInfo {
        name: "alice".into(),
        uid: String::new(),
        groups: vec!["system:authenticated".into()],
    };
    let as_alice = |path: String| {
        let alice = alice.clone();
        let api = &api;
        async move { api.call_as(Some(&alice), Method::GET, &path, None).await }
    };
    let r = as_alice(format!("{NS}/services/web:80/proxy/echo")).await;
    let (code, reason, message) = status(&r);
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert!(
        message.contains("cannot get resource \"services/proxy\""),
        "{message}"
    );
    created(
        &api,
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "services-reader"},
               "rules": [{"apiGroups": [""], "resources": ["services"], "verbs": ["get"]}]}),
    )
    .await;
    created(
        &api,
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "alice"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": "services-reader"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                             "name": "alice"}]}),
    )
    .await;
    eventually(
        Duration::from_secs(10),
        "alice reading services",
        || async {
            let r = as_alice(format!("{NS}/services/web")).await;
            (r.status == StatusCode::OK).then_some(())
        },
    )
    .await;
    let r = as_alice(format!("{NS}/services/web:80/proxy/echo")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = api
        .patch(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles/services-reader",
            "application/merge-patch+json",
            json!({"rules": [{"apiGroups": [""], "resources": ["services", "services/proxy"],
                              "verbs": ["get"]}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = eventually(Duration::from_secs(10), "alice proxying", || async {
        let r = as_alice(format!("{NS}/services/web:80/proxy/echo")).await;
        (r.status == StatusCode::OK).then_some(r)
    })
    .await;
    assert_eq!(r.json()["path"], "/echo");
    // `get` does not make a POST through the proxy (`create`) allowed, nor pods/proxy.
    let r = api
        .call_as(
            Some(&alice),
            Method::POST,
            &format!("{NS}/services/web:80/proxy/echo"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = as_alice(format!("{NS}/pods/web/proxy/echo")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}
