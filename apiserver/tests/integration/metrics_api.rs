//! `metrics.k8s.io` against a fake kubelet: a TLS server on loopback with a serving
//! certificate of the cluster CA, answering `/stats/summary` with counters that grow on every
//! scrape. Checks discovery, node and pod metrics, selectors, and what is left out.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use http::StatusCode;
use minik8s_apiserver::pki::{Pki, ServingNames};
use serde_json::{Value, json};
use testkit::{Backend, InProcess};

/// Scrapes so far; each adds a second of CPU time to the node and 10ms to each container.
#[derive(Default)]
struct Kubelet {
    scrapes: AtomicU64,
}

async fn summary(State(k): State<Arc<Kubelet>>) -> axum::Json<Value> {
    let n = k.scrapes.fetch_add(1, Ordering::SeqCst) + 1;
    let container = |name: &str| {
        json!({"name": name, "startTime": "2026-01-01T00:00:00Z",
            "cpu": {"time": "2026-01-01T00:00:00Z", "usageCoreNanoSeconds": n * 10_000_000},
            "memory": {"time": "2026-01-01T00:00:00Z", "workingSetBytes": 4 * 1024 * 1024}})
    };
    axum::Json(json!({
        "node": {"nodeName": "real", "startTime": "2026-01-01T00:00:00Z",
            "cpu": {"time": "2026-01-01T00:00:00Z", "usageCoreNanoSeconds": n * 1_000_000_000},
            "memory": {"time": "2026-01-01T00:00:00Z", "workingSetBytes": 512 * 1024 * 1024}},
        "pods": [
            {"podRef": {"name": "web", "namespace": "default", "uid": "u1"},
             "startTime": "2026-01-01T00:00:00Z",
             "containers": [container("a"), container("b")]},
            {"podRef": {"name": "db", "namespace": "default", "uid": "u2"},
             "startTime": "2026-01-01T00:00:00Z",
             "containers": [container("main")]}
        ]
    }))
}

/// Starts the fake kubelet; returns its port.
async fn fake_kubelet(data_dir: PathBuf, kubelet: Arc<Kubelet>) -> u16 {
    let pki = Pki::ensure(&data_dir.join("pki"), &ServingNames::default()).unwrap();
    let names = ServingNames {
        dns: vec![],
        ips: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
    };
    let serving = pki.issue("kubelet", &[], &names, true).unwrap();
    let tls = minik8s_apiserver::serve::tls_config(&Pki { serving, ..pki }).unwrap();
    let app = Router::new()
        .route("/stats/summary", get(summary))
        .with_state(kubelet);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(minik8s_apiserver::serve::serve_tls(
        listener,
        tls,
        app,
        std::future::pending(),
    ));
    port
}

async fn node(api: &InProcess, name: &str, labels: Value, kubelet_port: Option<u16>) {
    let r = api
        .post(
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    let mut node = r.json();
    node["status"] = json!({
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port.unwrap_or(0)}},
        "allocatable": {"cpu": "4", "memory": "8Gi"}
    });
    let r = api.put(&format!("/api/v1/nodes/{name}/status"), node).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
}

async fn pod(api: &InProcess, name: &str, node: &str, labels: Value) {
    let r = api
        .post(
            "/api/v1/namespaces/default/pods",
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": labels},
                "spec": {"nodeName": node, "containers": [{"name": "a", "image": "busybox"}]}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn node_and_pod_metrics_from_the_kubelet() {
    let mut data_dir = PathBuf::new();
    let api = InProcess::start_with(Backend::Sqlite, |c| data_dir = c.data_dir.clone())
        .await
        .unwrap();
    let kubelet = Arc::new(Kubelet::default());
    let port = fake_kubelet(data_dir, kubelet.clone()).await;
    node(&api, "real", json!({"role": "worker"}), Some(port)).await;
    // No kubelet endpoint (a hollow node): never scraped.
    node(&api, "hollow", json!({"role": "worker"}), None).await;
    pod(&api, "web", "real", json!({"app": "web"})).await;
    pod(&api, "db", "real", json!({"app": "db"})).await;
    pod(&api, "elsewhere", "hollow", json!({"app": "web"})).await;

    // Discovery, legacy and aggregated.
    let groups = api.get("/apis").await.json();
    let group = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "metrics.k8s.io")
        .expect("metrics.k8s.io in /apis");
    assert_eq!(
        group["preferredVersion"]["groupVersion"],
        "metrics.k8s.io/v1beta1"
    );
    let resources = api.get("/apis/metrics.k8s.io/v1beta1").await.json();
    let listed: Vec<(&str, &str, bool)> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap(),
                r["kind"].as_str().unwrap(),
                r["namespaced"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("nodes", "NodeMetrics", false),
            ("pods", "PodMetrics", true)
        ]
    );
    // The first request scrapes twice: the rate is there at once.
    let list = api.get("/apis/metrics.k8s.io/v1beta1/nodes").await;
    assert_eq!(list.status, StatusCode::OK, "{:?}", list.body);
    let list = list.json();
    assert_eq!(list["kind"], "NodeMetricsList");
    assert_eq!(list["apiVersion"], "metrics.k8s.io/v1beta1");
    assert_eq!(names(&list), ["real"]);
    let m = &list["items"][0];
    assert_eq!(m["metadata"]["labels"]["role"], "worker");
    assert_eq!(m["usage"]["memory"], "512Mi");
    assert!(m["usage"]["cpu"].as_str().unwrap().ends_with('n'), "{m}");
    assert!(m["window"].as_str().unwrap().ends_with('s'), "{m}");
    assert!(m["timestamp"].is_string(), "{m}");
    assert_eq!(kubelet.scrapes.load(Ordering::SeqCst), 2);

    let one = api.get("/apis/metrics.k8s.io/v1beta1/nodes/real").await;
    assert_eq!(one.status, StatusCode::OK);
    assert_eq!(one.json()["kind"], "NodeMetrics");
    // Within the resolution, the stored scrapes answer.
    assert_eq!(kubelet.scrapes.load(Ordering::SeqCst), 2);
    let missing = api.get("/apis/metrics.k8s.io/v1beta1/nodes/hollow").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(
        missing.json()["message"],
        "nodemetrics.metrics.k8s.io \"hollow\" not found"
    );
    let absent = api.get("/apis/metrics.k8s.io/v1beta1/nodes/nope").await;
    assert_eq!(absent.status, StatusCode::NOT_FOUND);
    assert_eq!(absent.json()["message"], "nodes \"nope\" not found");
    let selected = api
        .get("/apis/metrics.k8s.io/v1beta1/nodes?labelSelector=role%3Dnone")
        .await
        .json();
    assert_eq!(names(&selected), Vec::<String>::new());

    // Pods: namespaced and across namespaces, by label, one by one.
    let pods = api
        .get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods")
        .await
        .json();
    assert_eq!(pods["kind"], "PodMetricsList");
    assert_eq!(names(&pods), ["db", "web"]);
    let web = &pods["items"][1];
    assert_eq!(web["metadata"]["namespace"], "default");
    assert_eq!(web["metadata"]["labels"]["app"], "web");
    let containers: Vec<&str> = web["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(containers, ["a", "b"]);
    assert_eq!(web["containers"][0]["usage"]["memory"], "4Mi");
    let all = api.get("/apis/metrics.k8s.io/v1beta1/pods").await.json();
    assert_eq!(names(&all), ["db", "web"]);
    let by_label = api
        .get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb")
        .await
        .json();
    assert_eq!(names(&by_label), ["web"]);
    let other_ns = api
        .get("/apis/metrics.k8s.io/v1beta1/namespaces/kube-system/pods")
        .await
        .json();
    assert_eq!(names(&other_ns), Vec::<String>::new());
    let one = api
        .get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/db")
        .await;
    assert_eq!(one.status, StatusCode::OK);
    assert_eq!(one.json()["kind"], "PodMetrics");
    let no_data = api
        .get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/elsewhere")
        .await;
    assert_eq!(no_data.status, StatusCode::NOT_FOUND);
    assert_eq!(
        no_data.json()["message"],
        "podmetrics.metrics.k8s.io \"default/elsewhere\" not found"
    );
    let watch = api
        .get("/apis/metrics.k8s.io/v1beta1/pods?watch=true")
        .await;
    assert_eq!(watch.status, StatusCode::METHOD_NOT_ALLOWED);
}

/// What kubectl sends for `kubectl get`.
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

/// A Table's column names and its rows' cells.
fn table(api_reply: testkit::Reply) -> (Vec<String>, Vec<Vec<Value>>) {
    assert_eq!(api_reply.status, StatusCode::OK, "{:?}", api_reply.body);
    let t = api_reply.json();
    assert_eq!(t["kind"], "Table", "{t}");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    let columns = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    let rows = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            // kubectl's default includeObject: the object's metadata.
            assert_eq!(r["object"]["kind"], "PartialObjectMetadata", "{r}");
            r["cells"].as_array().unwrap().clone()
        })
        .collect();
    (columns, rows)
}

fn first_cells(rows: &[Vec<Value>]) -> Vec<&str> {
    rows.iter().map(|r| r[0].as_str().unwrap()).collect()
}

#[tokio::test]
async fn tables_openapi_and_deleted_nodes() {
    let mut data_dir = PathBuf::new();
    let api = InProcess::start_with(Backend::Sqlite, |c| data_dir = c.data_dir.clone())
        .await
        .unwrap();
    let kubelet = Arc::new(Kubelet::default());
    let port = fake_kubelet(data_dir, kubelet.clone()).await;
    node(&api, "real", json!({"role": "worker"}), Some(port)).await;
    // Another node object answered by the same fake kubelet.
    node(&api, "gone", json!({"role": "worker"}), Some(port)).await;
    pod(&api, "web", "real", json!({"app": "web"})).await;
    pod(&api, "db", "real", json!({"app": "db"})).await;

    // `kubectl get nodes.metrics.k8s.io`: metrics-server's columns.
    let nodes = api
        .get_accepting("/apis/metrics.k8s.io/v1beta1/nodes", TABLE)
        .await;
    let r = nodes.json();
    let described: Vec<(&str, &str, &str)> = r["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["format"].as_str().unwrap(),
                c["description"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        described,
        [
            ("Name", "name", "Name of the resource"),
            ("cpu", "quantity", ""),
            ("memory", "quantity", ""),
            ("Window", "duration", "")
        ]
    );
    let (columns, rows) = table(nodes);
    assert_eq!(columns, ["Name", "cpu", "memory", "Window"]);
    assert_eq!(first_cells(&rows), ["gone", "real"]);
    for row in &rows {
        assert!(row[1].as_str().unwrap().ends_with('n'), "{row:?}");
        assert_eq!(row[2], "512Mi");
        assert!(row[3].as_str().unwrap().ends_with('s'), "{row:?}");
    }
    let (_, one) = table(
        api.get_accepting("/apis/metrics.k8s.io/v1beta1/nodes/real", TABLE)
            .await,
    );
    assert_eq!(first_cells(&one), ["real"]);

    // `kubectl get pods.metrics.k8s.io`: a pod's usage is its containers' together.
    let (columns, rows) = table(
        api.get_accepting(
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods",
            TABLE,
        )
        .await,
    );
    assert_eq!(columns, ["Name", "cpu", "memory", "Window"]);
    assert_eq!(first_cells(&rows), ["db", "web"]);
    assert_eq!(rows[0][2], "4Mi");
    assert_eq!(rows[1][2], "8Mi");
    // Label selectors, as the HPA controller lists its target's pods, in every form.
    for (selector, expected) in [
        ("app%3Dweb", vec!["web"]),
        ("app%20in%20(web,db)", vec!["db", "web"]),
        ("app!%3Dweb", vec!["db"]),
        ("app", vec!["db", "web"]),
        ("app%3Dnone", vec![]),
    ] {
        for prefix in ["/namespaces/default", ""] {
            let path =
                format!("/apis/metrics.k8s.io/v1beta1{prefix}/pods?labelSelector={selector}");
            let list = api.get(&path).await;
            assert_eq!(list.status, StatusCode::OK, "{path}: {:?}", list.body);
            assert_eq!(names(&list.json()), expected, "{path}");
            let (_, rows) = table(api.get_accepting(&path, TABLE).await);
            assert_eq!(first_cells(&rows), expected, "{path}");
        }
    }
    let bad = api
        .get("/apis/metrics.k8s.io/v1beta1/pods?labelSelector=app%3D%3D%3D")
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);

    // `kubectl explain nodes.metrics.k8s.io`: the kinds in the group version's OpenAPI v3
    // document, found by their GVK.
    let index = api.get("/openapi/v3").await.json();
    let url = index["paths"]["apis/metrics.k8s.io/v1beta1"]["serverRelativeURL"]
        .as_str()
        .expect("metrics.k8s.io/v1beta1 in the OpenAPI index")
        .to_string();
    let doc = api.get(&url).await;
    assert_eq!(doc.status, StatusCode::OK);
    let doc = doc.json();
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let by_kind = |kind: &str| {
        let gvk = json!({"group": "metrics.k8s.io", "version": "v1beta1", "kind": kind});
        schemas
            .iter()
            .find(|(_, s)| {
                s["x-kubernetes-group-version-kind"]
                    .as_array()
                    .is_some_and(|l| l.contains(&gvk))
            })
            .map(|(name, s)| (name.as_str(), s))
            .unwrap_or_else(|| panic!("no schema for {kind}"))
    };
    let (name, node_schema) = by_kind("NodeMetrics");
    assert_eq!(name, "io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics");
    assert_eq!(
        node_schema["description"],
        "NodeMetrics sets resource usage metrics of a node."
    );
    for field in [
        "apiVersion",
        "kind",
        "metadata",
        "timestamp",
        "window",
        "usage",
    ] {
        assert!(
            node_schema["properties"][field].is_object(),
            "NodeMetrics.{field}"
        );
    }
    let (name, list) = by_kind("NodeMetricsList");
    assert_eq!(
        name,
        "io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetricsList"
    );
    assert_eq!(
        list["properties"]["items"]["items"]["$ref"],
        "#/components/schemas/io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics"
    );
    let (name, pod_schema) = by_kind("PodMetrics");
    assert_eq!(name, "io.k8s.metrics.pkg.apis.metrics.v1beta1.PodMetrics");
    by_kind("PodMetricsList");
    assert!(pod_schema["properties"]["containers"].is_object());
    let container = &schemas["io.k8s.metrics.pkg.apis.metrics.v1beta1.ContainerMetrics"];
    assert!(container["properties"]["usage"].is_object(), "{container}");

    // A deleted node is gone from the metrics; created again under its name, it is another
    // node: scraped twice anew, not rated against the old object's readings.
    let r = api.delete("/api/v1/nodes/gone").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let list = api.get("/apis/metrics.k8s.io/v1beta1/nodes").await.json();
    assert_eq!(names(&list), ["real"]);
    let missing = api.get("/apis/metrics.k8s.io/v1beta1/nodes/gone").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let (_, rows) = table(
        api.get_accepting("/apis/metrics.k8s.io/v1beta1/nodes", TABLE)
            .await,
    );
    assert_eq!(first_cells(&rows), ["real"]);
    let before = kubelet.scrapes.load(Ordering::SeqCst);
    node(&api, "gone", json!({"role": "worker"}), Some(port)).await;
    let list = api.get("/apis/metrics.k8s.io/v1beta1/nodes").await.json();
    assert_eq!(names(&list), ["gone", "real"]);
    // (And "real" once more, on a machine slow enough to take its reuse period to get here.)
    assert!(kubelet.scrapes.load(Ordering::SeqCst) >= before + 2);
}
