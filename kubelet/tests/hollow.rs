//! Hollow kubelets (the real kubelet on the hollow fake runtime, as kubemark) against an
//! in-process API server: nodes register and stay Ready with renewed Leases, and pods bound to
//! them go through the real kubelet's status path: Running with an address from the node's
//! range, Failed with the exit code the pod's annotation asks for, deleted gracefully.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use minik8s_kubelet::Capacity;
use minik8s_kubelet::hollow::{self, HollowKubelets};
use serde_json::json;
use testkit::{Backend, InProcess, eventually};

const WAIT: Duration = Duration::from_secs(30);

struct Cluster {
    api: InProcess,
    root: tempfile::TempDir,
    kubelets: tokio::task::JoinHandle<()>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kubelets.abort();
    }
}

async fn cluster(count: usize) -> Cluster {
    let api = InProcess::start(Backend::Sqlite).await.unwrap();
    let root = tempfile::tempdir().unwrap();
    let config = HollowKubelets {
        count,
        prefix: "hollow-".into(),
        capacity: Capacity {
            cpus: 4,
            memory_bytes: 16 << 30,
            ephemeral_bytes: 100 << 30,
        },
        max_pods: 110,
        labels: vec![("minik8s.io/hollow".into(), "hollow".into())],
        root_dir: root.path().to_path_buf(),
        lease_duration_seconds: 4,
        status_update_frequency: Duration::from_millis(500),
    };
    let client = api.client();
    let kubelets = tokio::spawn(async move {
        hollow::run(client, config).await.expect("hollow kubelets");
    });
    Cluster {
        api,
        root,
        kubelets,
    }
}

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

fn pod_ready(pod: &Pod) -> Option<bool> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status == "True")
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

async fn create(pods: &Api<Pod>, pod: serde_json::Value) -> Pod {
    let pod: Pod = serde_json::from_value(pod).unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap()
}

/// The pod once `check` holds for it.
async fn wait_for(pods: &Api<Pod>, name: &str, what: &str, check: impl Fn(&Pod) -> bool) -> Pod {
    eventually(WAIT, what, || async {
        pods.get_opt(name).await.ok().flatten().filter(|p| check(p))
    })
    .await
}

#[tokio::test]
async fn nodes_register_stay_ready_and_renew_leases() {
    let c = cluster(3).await;
    let nodes: Api<Node> = Api::all(c.api.client());
    let listed = eventually(WAIT, "3 Ready hollow nodes", || async {
        let list = nodes.list(&Default::default()).await.ok()?;
        (list.items.len() == 3 && list.items.iter().all(ready)).then_some(list.items)
    })
    .await;
    for node in &listed {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels["minik8s.io/hollow"], "hollow");
        let status = node.status.clone().unwrap();
        assert_eq!(status.capacity.as_ref().unwrap()["cpu"].0, "4");
        assert_eq!(status.capacity.as_ref().unwrap()["pods"].0, "110");
        let internal = status
            .addresses
            .unwrap()
            .into_iter()
            .find(|a| a.type_ == "InternalIP")
            .unwrap();
        assert!(internal.address.starts_with("100.127.0."), "{internal:?}");
        let info = status.node_info.unwrap();
        assert_eq!(info.container_runtime_version, "fake://1.0");
    }

    let leases: Api<Lease> = Api::namespaced(c.api.client(), "kube-node-lease");
    let renew_time = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.clone());
    let first: BTreeMap<String, _> = eventually(WAIT, "3 node leases", || async {
        let list = leases.list(&Default::default()).await.ok()?;
        (list.items.len() == 3).then(|| {
            list.items
                .iter()
                .map(|l| (l.metadata.name.clone().unwrap(), renew_time(l)))
                .collect()
        })
    })
    .await;
    eventually(WAIT, "every lease renewed", || async {
        let list = leases.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .all(|l| {
                let name = l.metadata.name.as_deref().unwrap();
                renew_time(l).is_some() && first.get(name) != Some(&renew_time(l))
            })
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn pods_run_fail_with_their_exit_code_and_are_deleted() {
    let c = cluster(3).await;
    let pods: Api<Pod> = Api::namespaced(c.api.client(), "default");

    create(
        &pods,
        json!({"metadata": {"name": "web"},
               "spec": {"nodeName": "hollow-1", "containers": [{"name": "c", "image": "nginx"}]}}),
    )
    .await;
    let web = wait_for(&pods, "web", "web Running and Ready", |p| {
        phase(p) == Some("Running") && pod_ready(p) == Some(true)
    })
    .await;
    let status = web.status.clone().unwrap();
    let ip: Ipv4Addr = status.pod_ip.as_deref().unwrap().parse().unwrap();
    assert_eq!(
        ip.octets()[..3],
        [100, 64, 1],
        "from hollow-1's range: {ip}"
    );
    assert_eq!(status.host_ip.as_deref(), Some("100.127.0.1"));
    let cs = &status.container_statuses.unwrap()[0];
    assert!(cs.ready && cs.state.as_ref().unwrap().running.is_some());

    create(
        &pods,
        json!({"metadata": {"name": "job", "annotations": {"hollow.minik8s.io/exit-code": "3"}},
               "spec": {"nodeName": "hollow-1", "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox"}]}}),
    )
    .await;
    let job = wait_for(&pods, "job", "job Failed", |p| phase(p) == Some("Failed")).await;
    let cs = &job.status.unwrap().container_statuses.unwrap()[0];
    let terminated = cs.state.as_ref().unwrap().terminated.clone().unwrap();
    assert_eq!(terminated.exit_code, 3);
    assert_eq!(terminated.reason.as_deref(), Some("Error"));
    assert_eq!(cs.restart_count, 0);

    create(
        &pods,
        json!({"metadata": {"name": "done"},
               "spec": {"nodeName": "hollow-2", "restartPolicy": "OnFailure",
                        "initContainers": [{"name": "init", "image": "busybox"}],
                        "containers": [{"name": "c", "image": "busybox"}]}}),
    )
    .await;
    let done = wait_for(&pods, "done", "done Succeeded", |p| {
        phase(p) == Some("Succeeded")
    })
    .await;
    let status = done.status.unwrap();
    let init = &status.init_container_statuses.unwrap()[0];
    assert_eq!(
        init.state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        0
    );

    pods.delete("web", &DeleteParams::default()).await.unwrap();
    eventually(WAIT, "web deleted", || async {
        matches!(pods.get_opt("web").await, Ok(None)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn volumes_are_plain_directories_and_readiness_follows_the_annotation() {
    let c = cluster(1).await;
    let client = c.api.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "cfg"}, "data": {"k": "v"}})).unwrap();
    Api::<ConfigMap>::namespaced(client, "default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let pod = create(
        &pods,
        json!({"metadata": {"name": "vol", "annotations": {"hollow.minik8s.io/ready": "false"}},
               "spec": {"nodeName": "hollow-0",
                        "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}},
                                    {"name": "mem", "emptyDir": {"medium": "Memory"}}],
                        "containers": [{"name": "c", "image": "busybox",
                                        "readinessProbe": {"httpGet": {"port": 80}, "periodSeconds": 1},
                                        "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"},
                                                         {"name": "mem", "mountPath": "/mem", "subPath": "x"}]}]}}),
    )
    .await;
    // The same probe without the annotation passes: answered by the runtime, never dialed.
    create(
        &pods,
        json!({"metadata": {"name": "probed"},
               "spec": {"nodeName": "hollow-0",
                        "containers": [{"name": "c", "image": "busybox",
                                        "readinessProbe": {"httpGet": {"port": 80}, "periodSeconds": 1}}]}}),
    )
    .await;
    wait_for(&pods, "probed", "probed Ready", |p| {
        pod_ready(p) == Some(true)
    })
    .await;
    let events: Api<Event> = Api::namespaced(c.api.client(), "default");
    eventually(WAIT, "a failed readiness probe of vol", || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("vol")
                    && e.reason.as_deref() == Some("Unhealthy")
            })
            .then_some(())
    })
    .await;
    let vol = wait_for(&pods, "vol", "vol Running", |p| phase(p) == Some("Running")).await;
    assert_eq!(pod_ready(&vol), Some(false), "the readiness probe fails");
    let uid = pod.metadata.uid.unwrap();
    let volumes = c
        .root
        .path()
        .join("hollow-0/pods")
        .join(&uid)
        .join("volumes");
    let value = std::fs::read_to_string(volumes.join("kubernetes.io~configmap/cfg/k")).unwrap();
    assert_eq!(value, "v");
    let mem = volumes.join("kubernetes.io~empty-dir/mem");
    assert!(mem.join("x").is_dir(), "the subPath is made in place");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(c.root.path().to_str().unwrap()),
        "nothing is mounted under the hollow kubelets' root"
    );
}
