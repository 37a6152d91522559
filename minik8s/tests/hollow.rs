//! `minik8s hollow-nodes --morph kubelet` as a process against a server on loopback: the nodes
//! it registers carry the light morph's names, labels and capacity, and run their pods through
//! the real kubelet.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use testkit::{Backend, TestServer, eventually};

const WAIT: Duration = Duration::from_secs(60);

/// The hollow-nodes process; killed when dropped, so a failed assertion leaves none behind.
struct Hollow(Child);

impl Drop for Hollow {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

#[tokio::test]
async fn kubelet_morph_registers_nodes_that_run_pods() {
    let server = TestServer::start(Backend::Sqlite).await.unwrap();
    let client = server.client().await.unwrap();
    let root = tempfile::tempdir().unwrap();
    let _hollow = Hollow(
        Command::new(env!("CARGO_BIN_EXE_minik8s"))
            .args(["hollow-nodes", "--morph", "kubelet", "--count", "2"])
            .args(["--cpu", "8", "--memory", "32Gi", "--max-pods", "50"])
            .args(["--node-labels", "zone=a"])
            .arg("--kubeconfig")
            .arg(&server.kubeconfig)
            .arg("--root-dir")
            .arg(root.path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start minik8s hollow-nodes"),
    );
    let nodes: Api<Node> = Api::all(client.clone());
    let listed = eventually(WAIT, "2 Ready hollow nodes", || async {
        let list = nodes
            .list(&ListParams::default().labels("minik8s.io/hollow=hollow-node,zone=a"))
            .await
            .ok()?;
        (list.items.len() == 2 && list.items.iter().all(ready)).then_some(list.items)
    })
    .await;
    let mut names: Vec<String> = listed
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["hollow-node-0", "hollow-node-1"]);
    let capacity = listed[0].status.clone().unwrap().capacity.unwrap();
    assert_eq!(capacity["cpu"].0, "8");
    assert_eq!(capacity["memory"].0, format!("{}Ki", 32 << 20));
    assert_eq!(capacity["pods"].0, "50");

    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"nodeName": "hollow-node-1", "containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let ip = eventually(WAIT, "p Running with an address", || async {
        let p = pods.get("p").await.ok()?;
        let status = p.status?;
        (status.phase.as_deref() == Some("Running"))
            .then_some(status.pod_ip)
            .flatten()
    })
    .await;
    assert!(ip.starts_with("100.64.1."), "hollow-node-1's range: {ip}");
    assert!(
        root.path().join("hollow-node-1/pods").is_dir(),
        "the kubelet's pods directory is under --root-dir"
    );
}
