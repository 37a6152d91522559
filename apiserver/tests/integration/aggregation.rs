//! The aggregation layer: an APIService hands a group version to an HTTPS server on
//! loopback behind a Service (an EndpointSlice naming 127.0.0.1), which then answers
//! requests through this server with the user in the front-proxy headers, shows in
//! discovery, and is `Available` exactly while it answers. Built-in group versions have
//! Local APIServices.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use http::StatusCode;
use minik8s_apiserver::pki::ServingNames;
use serde_json::{Value, json};
use testkit::{Backend, InProcess, eventually};

use crate::https_server::{self, HttpsServer};

const GV: &str = "/apis/wardle.example.com/v1alpha1";
const APISERVICES: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

/// What the aggregated server saw of the last resource request: the front-proxy user and
/// groups, whether a bearer token reached it, and whether a client certificate did.
type Seen = Arc<Mutex<Option<Value>>>;

fn answer(path: &str, headers: &http::HeaderMap, client_cert: bool, seen: &Seen) -> (u16, Value) {
    if path == GV {
        return (
            200,
            json!({
                "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "wardle.example.com/v1alpha1",
                "resources": [{"name": "flunders", "singularName": "flunder", "namespaced": true,
                               "kind": "Flunder", "verbs": ["get", "list"], "shortNames": ["fl"]}],
            }),
        );
    }
    if path == format!("{GV}/namespaces/default/flunders") {
        let all = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok().map(str::to_string))
                .collect()
        };
        let saw = json!({
            "user": all("x-remote-user"),
            "groups": all("x-remote-group"),
            "authorization": headers.contains_key("authorization"),
            "clientCert": client_cert,
        });
        *seen.lock().unwrap() = Some(saw);
        return (
            200,
            json!({
                "kind": "FlunderList", "apiVersion": "wardle.example.com/v1alpha1", "metadata": {},
                "items": [{"kind": "Flunder", "apiVersion": "wardle.example.com/v1alpha1",
                           "metadata": {"name": "f1", "namespace": "default"}}],
            }),
        );
    }
    (
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}),
    )
}

/// An aggregated server on loopback, its certificate for `api.default.svc`; returns its port
/// and the CA that signed it.
async fn start_backend(seen: Seen) -> (u16, String, HttpsServer) {
    let names = ServingNames {
        dns: vec!["api.default.svc".into()],
        ips: vec![],
    };
    let server = https_server::serve(names, move |req| {
        answer(req.path, req.headers, req.client_cert, &seen)
    })
    .await;
    (server.addr.port(), server.ca_pem.clone(), server)
}

/// The Available condition of an APIService: (status, reason).
async fn available(server: &InProcess, name: &str) -> Option<(String, String)> {
    let a = server.get(&format!("{APISERVICES}/{name}")).await.json();
    let c = a["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Available")?
        .clone();
    Some((
        c["status"].as_str()?.to_string(),
        c["reason"].as_str().unwrap_or_default().to_string(),
    ))
}

#[tokio::test]
async fn aggregated_api_is_proxied_discovered_and_available() {
    let server = InProcess::start(Backend::Sqlite).await.unwrap();
    let seen: Seen = Default::default();
    let (port, ca, _server) = start_backend(seen.clone()).await;
    let r = server
        .post(
            "/api/v1/namespaces/default/services",
            json!({
                "metadata": {"name": "api"},
                "spec": {"ports": [{"port": 443, "targetPort": port}]},
            }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices";
    let r = server
        .post(
            SLICES,
            json!({
                "metadata": {"name": "api-1", "labels": {"kubernetes.io/service-name": "api"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
                "ports": [{"port": port, "protocol": "TCP"}],
            }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let r = server
        .post(
            APISERVICES,
            json!({
                "metadata": {"name": "v1alpha1.wardle.example.com"},
                "spec": {
                    "group": "wardle.example.com", "version": "v1alpha1",
                    "service": {"namespace": "default", "name": "api"},
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(&ca),
                    "groupPriorityMinimum": 1000, "versionPriority": 15,
                },
            }),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    assert_eq!(r.json()["spec"]["service"]["port"], 443);

    eventually(
        Duration::from_secs(10),
        "the APIService available",
        || async {
            (available(&server, "v1alpha1.wardle.example.com").await
                == Some(("True".into(), "Passed".into())))
            .then_some(())
        },
    )
    .await;
    // Discovery lists the group and its resources; the group version is the server's own.
    let groups = server.get("/apis").await.json();
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "wardle.example.com"),
        "{groups}"
    );
    let list = server.get(GV).await.json();
    assert_eq!(list["resources"][0]["name"], "flunders");
    let aggregated = server
        .get_accepting(
            "/apis",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )
        .await
        .json();
    let wardle = aggregated["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "wardle.example.com")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        wardle["versions"][0]["resources"][0]["resource"], "flunders",
        "{wardle}"
    );

    // A resource request is proxied as the user, without the client's credentials.
    let r = server
        .post(
            "/api/v1/namespaces/default/serviceaccounts",
            json!({"metadata": {"name": "reader"}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let r = server
        .post(
            "/api/v1/namespaces/default/serviceaccounts/reader/token",
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.json());
    let token = r.json()["status"]["token"].as_str().unwrap().to_string();
    let req = http::Request::get(format!("{GV}/namespaces/default/flunders"))
        .header("authorization", format!("Bearer {token}"))
        .body(axum::body::Body::empty())
        .unwrap();
    let r = server.send(req).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "{:?}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.json()["items"][0]["metadata"]["name"], "f1");
    let saw = seen.lock().unwrap().clone().unwrap();
    assert_eq!(saw["user"], json!(["system:serviceaccount:default:reader"]));
    assert!(
        saw["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("system:serviceaccounts:default")),
        "{saw}"
    );
    assert_eq!(
        saw["authorization"], false,
        "the client's token reached the aggregated server"
    );
    assert_eq!(saw["clientCert"], true);
    let r = server
        .get(&format!("{GV}/namespaces/default/flunders"))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let saw = seen.lock().unwrap().clone().unwrap();
    assert_eq!(saw["user"], json!(["minik8s-admin"]));

    // Without endpoints: unavailable, and requests answer 503.
    let r = server.delete(&format!("{SLICES}/api-1")).await;
    assert_eq!(r.status, StatusCode::OK);
    // A write to any APIService makes the aggregator look again.
    let r = server
        .patch(
            &format!("{APISERVICES}/v1alpha1.wardle.example.com"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"touched": "yes"}}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json());
    eventually(
        Duration::from_secs(10),
        "the APIService unavailable",
        || async {
            (available(&server, "v1alpha1.wardle.example.com").await
                == Some(("False".into(), "MissingEndpoints".into())))
            .then_some(())
        },
    )
    .await;
    let r = server
        .get(&format!("{GV}/namespaces/default/flunders"))
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn built_in_group_versions_are_local_api_services() {
    let server = InProcess::start(Backend::Sqlite).await.unwrap();
    for name in [
        "v1.",
        "v1.apps",
        "v2.autoscaling",
        "v1.admissionregistration.k8s.io",
    ] {
        eventually(Duration::from_secs(10), "a Local APIService", || async {
            (available(&server, name).await == Some(("True".into(), "Local".into()))).then_some(())
        })
        .await;
    }
    let table = server
        .get_accepting(APISERVICES, "application/json;as=Table;v=v1;g=meta.k8s.io")
        .await
        .json();
    let row = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == "v1.apps")
        .cloned()
        .unwrap();
    assert_eq!(row["cells"][1], "Local");
    assert_eq!(row["cells"][2], "True");
}
