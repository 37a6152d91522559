//! Durability: SIGKILL the server while many clients write, start it again on the same data,
//! and check that every acknowledged write survived and revisions kept rising. Repeated.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testkit::{eventually, free_port, kube_client};

const WRITERS: usize = 32;
const ROUNDS: usize = 4;

/// The server process; killed when dropped, so a failed assertion leaves none behind.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(data_dir: &Path, port: u16) -> Server {
    let child = Command::new(env!("CARGO_BIN_EXE_minik8s"))
        .args([
            "server",
            "--data-dir",
            &data_dir.to_string_lossy(),
            "--secure-port",
            &port.to_string(),
            "--bind-address",
            "127.0.0.1",
            // Tests never touch the host's iptables or ports 53 and 80.
            "--disable-proxy",
            "--disable-dns",
            "--disable-ingress",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start minik8s");
    Server(child)
}

async fn ready(data_dir: &Path) -> kube::Client {
    eventually(Duration::from_secs(60), "the server to answer", || async {
        let client = kube_client(&data_dir.join("admin.kubeconfig")).await.ok()?;
        client.apiserver_version().await.ok()?;
        Some(client)
    })
    .await
}

/// What clients were told succeeded: for each object, the last acknowledged counter value.
type Acked = Arc<Mutex<BTreeMap<String, (i64, u64)>>>;

async fn writer(api: Api<ConfigMap>, round: usize, id: usize, acked: Acked) {
    let name = format!("r{round}-w{id}");
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"test": "crash"}}, "data": {"n": "0"}}),
    )
    .unwrap();
    let Ok(created) = api.create(&PostParams::default(), &cm).await else {
        return;
    };
    let rv: i64 = created.metadata.resource_version.unwrap().parse().unwrap();
    acked.lock().unwrap().insert(name.clone(), (rv, 0));
    for n in 1u64.. {
        let patch = Patch::Merge(json!({"data": {"n": n.to_string()}}));
        match api.patch(&name, &PatchParams::default(), &patch).await {
            Ok(obj) => {
                let rv: i64 = obj.metadata.resource_version.unwrap().parse().unwrap();
                acked.lock().unwrap().insert(name.clone(), (rv, n));
            }
            Err(_) => return,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut all: BTreeMap<String, (i64, u64)> = BTreeMap::new();
    let mut highest_acked = 0i64;
    for round in 0..ROUNDS {
        let port = free_port();
        let mut server = start(dir.path(), port);
        let client = ready(dir.path()).await;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

        // Everything acknowledged in earlier rounds is still there, unchanged or newer.
        // (The namespace holds the cluster's own ConfigMaps too, such as kube-root-ca.crt.)
        let list = api
            .list(&ListParams::default().labels("test=crash"))
            .await
            .unwrap();
        let stored: BTreeMap<String, (i64, u64)> = list
            .items
            .iter()
            .map(|c| {
                let n: u64 = c.data.as_ref().unwrap()["n"].parse().unwrap();
                (
                    c.metadata.name.clone().unwrap(),
                    (
                        c.metadata
                            .resource_version
                            .as_ref()
                            .unwrap()
                            .parse()
                            .unwrap(),
                        n,
                    ),
                )
            })
            .collect();
        for (name, (rv, n)) in &all {
            let (stored_rv, stored_n) = stored
                .get(name)
                .unwrap_or_else(|| panic!("round {round}: acknowledged {name} lost"));
            assert!(
                stored_n >= n && stored_rv >= rv,
                "round {round}: {name} went back from n={n} (rv {rv}) to n={stored_n} (rv {stored_rv})"
            );
        }
        let list_rv: i64 = list.metadata.resource_version.unwrap().parse().unwrap();
        assert!(
            list_rv >= highest_acked,
            "round {round}: revision went back from {highest_acked} to {list_rv}"
        );

        // Write from many clients, then kill the server mid-flight.
        let acked: Acked = Arc::default();
        let tasks: Vec<_> = (0..WRITERS)
            .map(|id| tokio::spawn(writer(api.clone(), round, id, acked.clone())))
            .collect();
        eventually(Duration::from_secs(60), "writes to be acknowledged", || {
            let count: u64 = acked.lock().unwrap().values().map(|(_, n)| n + 1).sum();
            async move { (count >= 400).then_some(()) }
        })
        .await;
        server.0.kill().expect("SIGKILL");
        server.0.wait().unwrap();
        for t in tasks {
            t.await.unwrap();
        }
        let acked = acked.lock().unwrap().clone();
        assert!(!acked.is_empty());
        let writes: u64 = acked.values().map(|(_, n)| n + 1).sum();
        eprintln!(
            "round {round}: {writes} acknowledged writes to {} objects before SIGKILL",
            acked.len()
        );
        highest_acked = highest_acked.max(acked.values().map(|(rv, _)| *rv).max().unwrap());
        all.extend(acked);
    }
    // One last start: everything is there and new writes get higher revisions.
    let mut server = start(dir.path(), free_port());
    let client = ready(dir.path()).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let list = api
        .list(&ListParams::default().labels("test=crash"))
        .await
        .unwrap();
    assert!(list.items.len() >= all.len());
    for (name, (_, n)) in &all {
        let c = list
            .items
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("{name} lost"));
        assert!(c.data.as_ref().unwrap()["n"].parse::<u64>().unwrap() >= *n);
    }
    let fresh: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "after-crashes"}})).unwrap();
    let fresh = api.create(&PostParams::default(), &fresh).await.unwrap();
    assert!(
        fresh
            .metadata
            .resource_version
            .unwrap()
            .parse::<i64>()
            .unwrap()
            > highest_acked
    );
    server.0.kill().unwrap();
    server.0.wait().unwrap();
}
