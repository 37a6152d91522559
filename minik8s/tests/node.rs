//! The node end to end, with the real binary and a real containerd: pods run with their own
//! IPs and logs, crashed containers restart, and a restarted node adopts its running
//! containers, keeps their restart counts, and removes what belongs to pods deleted while it
//! was down. Uses its own bridge, pod range and cgroup root, so it can run beside a cluster.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use minik8s_kubelet::images::{BuildOptions, ImageKind, build::build};
use serde_json::json;
use testkit::{eventually, free_port, kube_client};

const BRIDGE: &str = "m8se2e0";
const POD_CIDR: &str = "10.244.253.0/24";
const CGROUP_ROOT: &str = "/minik8s-e2e";
const NODE: &str = "e2e-node";

struct Node_ {
    child: Child,
    dir: std::path::PathBuf,
    port: u16,
}

fn start(dir: &Path, port: u16) -> Node_ {
    start_with(dir, port, &[])
}

fn start_with(dir: &Path, port: u16, extra: &[&str]) -> Node_ {
    let child = Command::new(env!("CARGO_BIN_EXE_minik8s"))
        .args([
            "server",
            "--data-dir",
            &dir.to_string_lossy(),
            "--secure-port",
            &port.to_string(),
            "--bind-address",
            "127.0.0.1",
            // Tests never touch the host's iptables or ports 53 and 80.
            "--disable-proxy",
            "--disable-dns",
            "--disable-ingress",
        ])
        .args(extra)
        .args([
            "--node-name",
            NODE,
            "--node-ip",
            "127.0.0.1",
            "--bridge",
            BRIDGE,
            "--pod-cidr",
            POD_CIDR,
            "--cluster-cidr",
            POD_CIDR,
        ])
        .args([
            "--cgroup-root",
            CGROUP_ROOT,
            "--service-cluster-ip-range",
            "10.96.0.0/12",
        ])
        // Another node on the machine may hold the default kubelet port.
        .args(["--kubelet-port", &free_port().to_string()])
        .env("RUST_LOG", "warn,minik8s_kubelet=info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("server.log")).expect("log file"))
        .spawn()
        .expect("start minik8s");
    Node_ {
        child,
        dir: dir.to_path_buf(),
        port,
    }
}

impl Node_ {
    /// SIGTERM: the node stops; containerd goes but containers keep running.
    fn stop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Node_ {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn client(dir: &Path) -> kube::Client {
    eventually(Duration::from_secs(60), "the API server", || async {
        let c = kube_client(&dir.join("admin.kubeconfig")).await.ok()?;
        c.apiserver_version().await.ok()?;
        Some(c)
    })
    .await
}

async fn node_ready(client: &kube::Client) {
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(Duration::from_secs(60), "the node to be Ready", || async {
        let n = nodes.get_opt(NODE).await.ok()??;
        n.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
}

fn cstatus(p: &Pod) -> Option<k8s_openapi::api::core::v1::ContainerStatus> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()
        .cloned()
}

async fn wait_pod<T>(
    pods: &Api<Pod>,
    name: &str,
    what: &str,
    check: impl Fn(&Pod) -> Option<T>,
) -> T {
    eventually(Duration::from_secs(60), what, || async {
        pods.get_opt(name).await.ok()?.as_ref().and_then(&check)
    })
    .await
}

fn pod(name: &str, command: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 2, "containers": [{
            "name": "main", "image": "busybox:1.36", "command": ["sh", "-c", command],
            "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1}
        }]}
    }))
    .unwrap()
}

fn cleanup_host() {
    let _ = Command::new("ip").args(["link", "del", BRIDGE]).status();
    let _ = minik8s_kubelet::cgroups::remove(Path::new("/sys/fs/cgroup"), CGROUP_ROOT);
}

/// Whatever happens to the test, leave nothing running or mounted on the host.
struct Teardown(std::path::PathBuf);

impl Drop for Teardown {
    fn drop(&mut self) {
        let _ = Command::new(env!("CARGO_BIN_EXE_minik8s"))
            .args([
                "teardown",
                "--data-dir",
                &self.0.to_string_lossy(),
                "--bridge",
                BRIDGE,
                "--cgroup-root",
                CGROUP_ROOT,
            ])
            .stderr(Stdio::null())
            .status();
        cleanup_host();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_restart_and_survive_a_node_restart() {
    let dir = tempfile::tempdir().unwrap();
    let _teardown = Teardown(dir.path().to_path_buf());
    let images = dir.path().join("images");
    for kind in [ImageKind::Pause, ImageKind::Busybox] {
        let opts = BuildOptions {
            busybox: Some("/bin/busybox".into()),
            ..BuildOptions::new(&images)
        };
        build(kind, &opts).expect("build image");
    }
    let port = free_port();
    let mut node = start(dir.path(), port);
    let c = client(dir.path()).await;
    node_ready(&c).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");

    // A pod runs with an IP from the node's range, reports Ready and writes its log.
    pods.create(
        &PostParams::default(),
        &pod("web", "echo started; sleep 3600"),
    )
    .await
    .unwrap();
    let ip = wait_pod(&pods, "web", "web to be Ready", |p| {
        let s = p.status.as_ref()?;
        s.conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then(|| s.pod_ip.clone())?
    })
    .await;
    assert!(ip.starts_with("10.244.253."), "{ip}");
    let web = pods.get("web").await.unwrap();
    let uid = web.metadata.uid.clone().unwrap();
    let web_container = cstatus(&web).unwrap().container_id.unwrap();
    let logs = std::fs::read_dir(dir.path().join("kubelet/logs"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().contains(&uid))
        .unwrap();
    let log = std::fs::read_to_string(logs.path().join("main/0.log")).unwrap();
    assert!(log.contains("stdout F started"), "{log}");

    // A crashing container is restarted, with its exit code as the last state.
    pods.create(&PostParams::default(), &pod("crash", "exit 7"))
        .await
        .unwrap();
    let last = wait_pod(&pods, "crash", "a restart of crash", |p| {
        let s = cstatus(p)?;
        (s.restart_count >= 1).then_some(s.last_state?.terminated?.exit_code)
    })
    .await;
    assert_eq!(last, 7);

    // A container over its memory limit is killed by the kernel and reported as OOMKilled.
    let oom: Pod = serde_json::from_value(json!({
        "metadata": {"name": "oom"},
        "spec": {"nodeName": NODE, "restartPolicy": "Never", "containers": [{
            "name": "main", "image": "busybox:1.36",
            "command": ["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"],
            "resources": {"limits": {"memory": "16Mi"}}
        }]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &oom).await.unwrap();
    let killed = wait_pod(&pods, "oom", "oom to be killed", |p| {
        let t = cstatus(p)?.state?.terminated?;
        Some((t.reason?, t.exit_code))
    })
    .await;
    assert_eq!(killed, ("OOMKilled".to_string(), 137));
    pods.delete("oom", &DeleteParams::default()).await.unwrap();
    eventually(Duration::from_secs(60), "oom to be gone", || async {
        pods.get_opt("oom").await.ok()?.is_none().then_some(())
    })
    .await;

    // The node goes down; meanwhile (control plane only) crash is force-deleted. The node comes
    // back: web's container is adopted (same ID, same restart count), crash's are removed.
    node.stop();
    let mut control_plane = start_with(dir.path(), port, &["--disable-agent"]);
    let c = client(dir.path()).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    pods.delete(
        "crash",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(pods.get_opt("crash").await.unwrap().is_none());
    control_plane.stop();
    drop(control_plane);
    let mut node = start(&node.dir.clone(), node.port);
    let c = client(dir.path()).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    node_ready(&c).await;
    use minik8s_kubelet::runtime::{CriRuntime, Runtime};
    let socket = dir.path().join("containerd/containerd.sock");
    // The node's status is still Ready from before: wait for the new runtime itself.
    let runtime = eventually(Duration::from_secs(60), "containerd to answer", || async {
        let r = CriRuntime::connect(&socket).await.ok()?;
        r.version().await.ok()?;
        Some(r)
    })
    .await;
    eventually(
        Duration::from_secs(60),
        "crash's containers to be removed",
        || async {
            let all = runtime.list_containers().await.ok()?;
            (!all.iter().any(|c| {
                c.metadata.as_ref().is_some_and(|m| m.name == "main")
                    && c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some("crash")
            }))
            .then_some(())
        },
    )
    .await;
    let web = pods.get("web").await.unwrap();
    let s = cstatus(&web).unwrap();
    assert_eq!(
        (s.container_id.as_deref(), s.restart_count),
        (Some(web_container.as_str()), 0),
        "adopted, not restarted"
    );

    // Deleting a pod stops its containers and removes it from the API.
    pods.delete("web", &DeleteParams::default()).await.unwrap();
    eventually(Duration::from_secs(60), "web to be gone", || async {
        pods.get_opt("web").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(runtime.list_pod_sandboxes().await.unwrap().is_empty());
    node.stop();
    drop(node);
    // Leave nothing on the host: containers, containerd, bridge, cgroups.
    let status = Command::new(env!("CARGO_BIN_EXE_minik8s"))
        .args([
            "teardown",
            "--data-dir",
            &dir.path().to_string_lossy(),
            "--bridge",
            BRIDGE,
            "--cgroup-root",
            CGROUP_ROOT,
        ])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    cleanup_host();
}
