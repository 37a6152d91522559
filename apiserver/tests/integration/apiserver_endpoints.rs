//! The `kubernetes` Service's endpoints with several API servers on one etcd (upstream's lease
//! endpoint reconciler): each server listed while its lease lives, one shut down gracefully
//! gone at once, one killed gone when its lease expires.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use minik8s_apiserver::registry::services::endpoint_reconciler::{
    MASTER_LEASES_PREFIX, ReconcilerType,
};
use minik8s_apiserver::{ApiServer, Config};
use serde_json::{Value, json};
use testkit::{Backend, Etcd, InProcess, eventually};

const ENDPOINTS: &str = "/api/v1/namespaces/default/endpoints/kubernetes";
const SLICE: &str = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes";

fn config(dir: &std::path::Path, etcd: &Etcd, ip: &str, ttl: Duration) -> Config {
    let mut c = Config::new(dir);
    c.etcd_servers = vec![etcd.endpoint.clone()];
    c.advertise_address = Some(ip.parse::<IpAddr>().unwrap());
    c.serve = testkit::test_serve_options();
    c.endpoint_reconciler.ttl = ttl;
    c.endpoint_reconciler.interval = Duration::from_millis(200);
    c
}

fn addresses(ep: &Value) -> Vec<String> {
    ep["subsets"][0]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| a["ip"].as_str().unwrap_or_default().to_string())
        .collect()
}

async fn listed(api: &InProcess) -> Vec<String> {
    addresses(&api.get(ENDPOINTS).await.json())
}

async fn wait_for(api: &InProcess, want: &[&str], within: Duration, what: &str) {
    let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    eventually(within, what, || {
        let want = want.clone();
        async move {
            let ep = api.get(ENDPOINTS).await.json();
            let slice = api.get(SLICE).await.json();
            let in_slice: Vec<String> = slice["endpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| e["addresses"][0].as_str().unwrap_or_default().to_string())
                .collect();
            (addresses(&ep) == want && in_slice == want).then_some(())
        }
    })
    .await
}

/// An API server on a runtime of its own, so that it can die without shutting down: its
/// tasks stop mid-flight and its lease is left to expire, as after a kill -9.
struct Killable {
    runtime: Option<tokio::runtime::Runtime>,
    server: Option<Arc<ApiServer>>,
}

impl Killable {
    async fn start(config: Config) -> Killable {
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let prepared = runtime
                .block_on(minik8s_apiserver::prepare(config))
                .unwrap();
            let _ = tx.send(Killable {
                runtime: Some(runtime),
                server: Some(prepared.server),
            });
        });
        rx.await.expect("the server started")
    }

    fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Killable {
    fn drop(&mut self) {
        self.kill();
        // What the server holds (etcd connections, channels) belonged to the runtime just
        // shut down; it is left undropped, as a dead process's memory would be.
        std::mem::forget(self.server.take());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoints_list_every_live_api_server() -> anyhow::Result<()> {
    testkit::init_tracing();
    let etcd = Etcd::start()?;
    let dirs = [
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
    ];
    // A stays; B shuts down gracefully with a lease that would outlive the wait for it; C is
    // killed with a short lease.
    let a = minik8s_apiserver::prepare(config(
        dirs[0].path(),
        &etcd,
        "127.0.0.1",
        Duration::from_secs(60),
    ))
    .await?;
    let b = minik8s_apiserver::prepare(config(
        dirs[1].path(),
        &etcd,
        "127.0.0.2",
        Duration::from_secs(60),
    ))
    .await?;
    let mut c = Killable::start(config(
        dirs[2].path(),
        &etcd,
        "127.0.0.3",
        Duration::from_secs(3),
    ))
    .await;
    let api = InProcess::from_server(a.server.clone());

    let all = ["127.0.0.1", "127.0.0.2", "127.0.0.3"];
    wait_for(
        &api,
        &all,
        Duration::from_secs(20),
        "all three servers listed",
    )
    .await;

    // The shape upstream writes: one subset, one port named https, the label that keeps the
    // mirroring controller away; the slice labelled with the service's name.
    let ep = api.get(ENDPOINTS).await.json();
    assert_eq!(
        ep["subsets"][0]["ports"],
        json!([{"name": "https", "port": 6443, "protocol": "TCP"}])
    );
    assert_eq!(ep["subsets"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        ep["metadata"]["labels"],
        json!({"endpointslice.kubernetes.io/skip-mirror": "true"})
    );
    let slice = api.get(SLICE).await.json();
    assert_eq!(
        slice["metadata"]["labels"],
        json!({"kubernetes.io/service-name": "kubernetes"})
    );
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(
        slice["ports"],
        json!([{"name": "https", "port": 6443, "protocol": "TCP"}])
    );
    for e in slice["endpoints"].as_array().unwrap() {
        assert_eq!(e["conditions"]["ready"], true, "{e}");
    }
    let leases = a.server.store.list_expiring(MASTER_LEASES_PREFIX).await?;
    assert_eq!(leases.len(), 3, "{leases:?}");

    // Graceful: B's lease goes with it and the endpoints are rewritten now, long before its
    // 60 s lease could have expired.
    b.server.stop_endpoint_reconciler().await;
    wait_for(
        &api,
        &["127.0.0.1", "127.0.0.3"],
        Duration::from_secs(20),
        "B removed on shutdown",
    )
    .await;
    // Stopped, B does not come back.
    wait_for(
        &api,
        &["127.0.0.1", "127.0.0.3"],
        Duration::from_secs(1),
        "B still gone",
    )
    .await;

    // Killed: C stays listed until its 3 s lease expires, then A's next reconcile drops it.
    c.kill();
    assert!(
        listed(&api).await.contains(&"127.0.0.3".to_string()),
        "a killed server is listed until its lease expires"
    );
    wait_for(
        &api,
        &["127.0.0.1"],
        Duration::from_secs(30),
        "C removed after its lease expired",
    )
    .await;
    let leases: Vec<String> = a
        .server
        .store
        .list_expiring(MASTER_LEASES_PREFIX)
        .await?
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(leases, [format!("{MASTER_LEASES_PREFIX}127.0.0.1")]);
    drop(c);
    Ok(())
}

#[tokio::test]
async fn a_lone_server_on_the_embedded_store_lists_itself() -> anyhow::Result<()> {
    let api = InProcess::start_with(Backend::Sqlite, |c| {
        c.advertise_address = Some("192.0.2.10".parse().unwrap());
    })
    .await?;
    assert_eq!(listed(&api).await, ["192.0.2.10"]);
    // Shut down, the last server leaves its address: no lease is no reason to erase them all.
    api.server.stop_endpoint_reconciler().await;
    assert_eq!(listed(&api).await, ["192.0.2.10"]);
    Ok(())
}

#[tokio::test]
async fn with_no_reconciler_the_endpoints_are_left_alone() -> anyhow::Result<()> {
    let api = InProcess::start_with(Backend::Sqlite, |c| {
        c.endpoint_reconciler.kind = ReconcilerType::None;
    })
    .await?;
    assert_eq!(api.get(ENDPOINTS).await.status, http::StatusCode::NOT_FOUND);
    // The Service is still there.
    let svc = api
        .get("/api/v1/namespaces/default/services/kubernetes")
        .await;
    assert_eq!(svc.status, http::StatusCode::OK);
    Ok(())
}
