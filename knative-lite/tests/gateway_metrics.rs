//! The function gateway's `/metrics`: a call through the gateway to a pod (a server on
//! loopback) moves Knative's request counter and latency histogram of the revision, and a
//! call held while the revision had no pod counts as the activator's too.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use k8s_openapi::api::core::v1::Pod;
use knative_lite::function;
use knative_lite::gateway::{self, Gateway};
use knative_lite::router::Router;
use knative_lite::serving::{Revision, Route, RouteSpec, RouteStatus, TrafficTarget, labels};
use minik8s_proxy::forward;
use testkit::eventually;
use tokio::net::TcpListener;

async fn listen() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    (l, a)
}

/// A "pod": answers every request with 200, or with 500 on `/fail`.
async fn backend() -> SocketAddr {
    let (listener, addr) = listen().await;
    tokio::spawn(forward::serve(
        listener,
        |req: http::Request<hyper::body::Incoming>, _| async move {
            if req.uri().path() == "/fail" {
                forward::plain(StatusCode::INTERNAL_SERVER_ERROR, "failed")
            } else {
                forward::plain(StatusCode::OK, "hi")
            }
        },
        std::future::pending(),
    ));
    addr
}

/// A function's Route, its Revision and, with an address, one ready pod of it there.
fn objects(name: &str, pod_addr: Option<SocketAddr>) -> Objects {
    let rev_name = format!("{name}-00001");
    let mut route = Route::new(name, RouteSpec::default());
    route.metadata.namespace = Some("default".into());
    route.metadata.labels = Some(BTreeMap::from([(
        function::labels::FUNCTION.to_string(),
        name.to_string(),
    )]));
    route.status = Some(RouteStatus {
        url: Some(format!("http://{name}.default.example.com")),
        traffic: vec![TrafficTarget {
            revision_name: Some(rev_name.clone()),
            percent: Some(100),
            ..Default::default()
        }],
        ..Default::default()
    });
    let port = pod_addr.map_or(8080, |a| a.port());
    let mut rev: Revision = serde_json::from_value(serde_json::json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Revision",
        "metadata": {"name": rev_name, "namespace": "default", "labels": {
            labels::SERVICE: name, labels::CONFIGURATION: name}},
        "spec": {"containers": [{"image": "x", "ports": [{"containerPort": port}]}]},
    }))
    .unwrap();
    rev.spec.timeout_seconds = Some(30);
    let pods = pod_addr
        .map(|a| {
            Arc::new(
                serde_json::from_value::<Pod>(serde_json::json!({
                    "metadata": {"name": format!("{name}-pod"), "namespace": "default",
                                 "labels": {labels::REVISION: format!("{name}-00001")}},
                    "status": {"podIP": a.ip().to_string(),
                               "conditions": [{"type": "Ready", "status": "True"}]},
                }))
                .unwrap(),
            )
        })
        .into_iter()
        .collect();
    (vec![Arc::new(route)], vec![Arc::new(rev)], pods)
}

type Objects = (Vec<Arc<Route>>, Vec<Arc<Revision>>, Vec<Arc<Pod>>);

async fn start_gateway(router: Arc<Router>) -> SocketAddr {
    // The function path never calls the API; the client only has to exist.
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let gw = Gateway::new(router, client);
    let (listener, addr) = listen().await;
    tokio::spawn(gateway::serve(gw, listener, std::future::pending()));
    addr
}

async fn get(addr: SocketAddr, path: &str) -> (StatusCode, String) {
    let client = forward::http_client::<Empty<Bytes>>();
    let resp = client
        .get(format!("http://{addr}{path}").parse().unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The value of `metric`'s sample for revision `rev` whose labels include all of `with`.
fn sample(text: &str, metric: &str, rev: &str, with: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .filter(|l| l.contains(&format!("revision_name=\"{rev}\"")))
        .find(|l| with.iter().all(|w| l.contains(w)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a_function_call_moves_the_request_counter_and_latency_histogram() {
    let pod = backend().await;
    let router = Arc::new(Router::new(None, None));
    let (routes, revisions, pods) = objects("metrics-hello", Some(pod));
    router.rebuild(&routes, &revisions, &pods);
    let gw = start_gateway(router).await;
    let rev = "metrics-hello-00001";
    let ok = "response_code=\"200\"";

    let (status, body) = get(gw, "/function/metrics-hello").await;
    assert_eq!((status, body.trim()), (StatusCode::OK, "hi"));
    let (status, _) = get(gw, "/function/metrics-hello/fail").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);

    // Recorded when the answer's body ends, on the gateway's side: poll for it.
    let text = eventually(
        Duration::from_secs(10),
        "the calls in the metrics",
        || async {
            let (status, text) = get(gw, gateway::METRICS_PATH).await;
            assert_eq!(status, StatusCode::OK);
            (sample(&text, "revision_request_count", rev, &[ok]) == 1.0
                && sample(
                    &text,
                    "revision_request_count",
                    rev,
                    &["response_code=\"500\""],
                ) == 1.0)
                .then_some(text)
        },
    )
    .await;
    let labels = [
        "namespace_name=\"default\"",
        "service_name=\"metrics-hello\"",
        "configuration_name=\"metrics-hello\"",
        "response_code_class=\"2xx\"",
        ok,
    ];
    assert_eq!(
        sample(&text, "revision_request_count", rev, &labels),
        1.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, "revision_request_latencies_count", rev, &labels),
        1.0,
        "{text}"
    );
    assert!(sample(&text, "revision_request_latencies_sum", rev, &labels) > 0.0);
    // The top bucket (100 s, in milliseconds) holds it; it was not held for a pod.
    assert_eq!(
        sample(
            &text,
            "revision_request_latencies_bucket",
            rev,
            &[ok, "le=\"100000\""]
        ),
        1.0
    );
    assert_eq!(sample(&text, "activator_request_count", rev, &[ok]), 0.0);
}

#[tokio::test]
async fn a_call_held_for_a_pod_counts_as_the_activators() {
    let pod = backend().await;
    let router = Arc::new(Router::new(None, None));
    let (routes, revisions, _) = objects("metrics-cold", None);
    router.rebuild(&routes, &revisions, &[]);
    let gw = start_gateway(router.clone()).await;
    let rev = "metrics-cold-00001";
    let ok = "response_code=\"200\"";

    let call = tokio::spawn(async move { get(gw, "/function/metrics-cold").await });
    // Held: the revision has no pod; it is counted in flight and waiting.
    eventually(Duration::from_secs(10), "the call to be held", || {
        let router = router.clone();
        async move {
            router
                .stats()
                .iter()
                .any(|s| s.name == rev && s.waiting == 1)
                .then_some(())
        }
    })
    .await;
    let (routes, revisions, pods) = objects("metrics-cold", Some(pod));
    router.rebuild(&routes, &revisions, &pods);
    let (status, _) = call.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    eventually(
        Duration::from_secs(10),
        "the held call in the metrics",
        || async {
            let (_, text) = get(gw, gateway::METRICS_PATH).await;
            (sample(&text, "activator_request_count", rev, &[ok]) == 1.0
                && sample(&text, "activator_request_latencies_count", rev, &[ok]) == 1.0
                && sample(&text, "revision_request_count", rev, &[ok]) == 1.0)
                .then_some(())
        },
    )
    .await;
}
