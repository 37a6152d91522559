//! The pod worker against a fake runtime and an in-process API server: what it asks of the
//! runtime and what status it reports, through restarts, back-off, image and config errors,
//! completion, deletion and a kubelet restart.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::events::{Recorder, Reporter};
use minik8s_kubelet::KubeletConfig;
use minik8s_kubelet::pod::worker::{Memory, Shared};
use minik8s_kubelet::runtime::fake::FakeRuntime;
use serde_json::json;
use testkit::{Backend, InProcess};

struct Harness {
    api: InProcess,
    fake: Arc<FakeRuntime>,
    shared: Shared,
    _dir: tempfile::TempDir,
}

fn shared(api: &InProcess, fake: Arc<FakeRuntime>, dir: &std::path::Path) -> Shared {
    let mut config = KubeletConfig::new(
        "n1",
        "192.168.50.10".parse().unwrap(),
        dir,
        dir.join("none.sock"),
    );
    config.cgroups_path = dir.join("cgroup");
    let client = api.client();
    let (wake, _) = tokio::sync::mpsc::unbounded_channel();
    // As `run_with` does: the runtime's calls counted in the kubelet's metrics.
    let metrics = Arc::new(minik8s_kubelet::metrics::KubeletMetrics::new("n1"));
    let runtime = Arc::new(minik8s_kubelet::runtime::Instrumented::new(
        fake,
        metrics.runtime.clone(),
    ));
    Shared {
        volumes: minik8s_kubelet::volumes::VolumeManager::new(dir.join("pods"), client.clone()),
        prober: Default::default(),
        wake,
        config,
        client: client.clone(),
        runtime,
        recorder: Recorder::new(
            client,
            Reporter {
                controller: "kubelet".into(),
                instance: Some("n1".into()),
            },
        ),
        node_cpu: 2.0,
        node_memory: 8e9,
        memory: Mutex::new(Memory::default()),
        metrics,
        devices: None,
    }
}

async fn harness() -> Harness {
    let api = InProcess::start(Backend::Sqlite).await.unwrap();
    let fake = Arc::new(FakeRuntime::with_images(&[
        "busybox:1.36",
        "registry.k8s.io/pause:3.9",
    ]));
    let dir = tempfile::tempdir().unwrap();
    let shared = shared(&api, fake.clone(), dir.path());
    Harness {
        api,
        fake,
        shared,
        _dir: dir,
    }
}

impl Harness {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.api.client(), "default")
    }

    async fn create(&self, spec: serde_json::Value) -> Pod {
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap();
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap()
    }

    async fn get(&self) -> Pod {
        self.pods().get("p").await.unwrap()
    }

    async fn sync(&self) -> minik8s_kubelet::pod::worker::Outcome {
        let pod = self.get().await;
        self.shared.sync(&pod).await.unwrap()
    }
}

fn container(pod: &Pod) -> k8s_openapi::api::core::v1::ContainerStatus {
    pod.status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .clone()
}

fn waiting_reason(pod: &Pod) -> Option<String> {
    container(pod).state.unwrap().waiting.and_then(|w| w.reason)
}

#[tokio::test]
async fn runs_restarts_and_backs_off() {
    let h = harness().await;
    let uid = h
        .create(json!({"nodeName": "n1", "containers": [{"name": "c", "image": "busybox:1.36"}]}))
        .await
        .metadata
        .uid
        .unwrap();
    h.sync().await;
    let calls = h.fake.calls();
    assert!(calls.iter().any(|c| c == "RunPodSandbox p"), "{calls:?}");
    assert!(
        calls.iter().any(|c| c == "CreateContainer c#0"),
        "{calls:?}"
    );
    let pod = h.get().await;
    let status = pod.status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert!(status.pod_ip.as_deref().unwrap().starts_with("10.244.0."));
    assert_eq!(status.host_ip.as_deref(), Some("192.168.50.10"));
    let cs = container(&pod);
    assert!(cs.ready && cs.state.unwrap().running.is_some());
    let ready = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");

    // First crash: restarted at once.
    assert!(h.fake.exit(&uid, "c", 1, ""));
    h.sync().await;
    assert!(h.fake.calls().iter().any(|c| c == "CreateContainer c#1"));
    assert_eq!(container(&h.get().await).restart_count, 1);
    // Second crash: back-off (CrashLoopBackOff), last state kept.
    assert!(h.fake.exit(&uid, "c", 2, "Error"));
    let outcome = h.sync().await;
    assert!(!h.fake.calls().iter().any(|c| c == "CreateContainer c#2"));
    let requeue = outcome.requeue_after.expect("a retry after the back-off");
    assert!(
        requeue <= Duration::from_secs(10) && requeue > Duration::from_secs(5),
        "{requeue:?}"
    );
    let pod = h.get().await;
    assert_eq!(waiting_reason(&pod).as_deref(), Some("CrashLoopBackOff"));
    let cs = container(&pod);
    assert_eq!(cs.last_state.unwrap().terminated.unwrap().exit_code, 2);
    assert!(
        cs.state
            .unwrap()
            .waiting
            .unwrap()
            .message
            .unwrap()
            .starts_with("back-off 10s restarting failed container=c pod=p_default(")
    );

    // A new kubelet (empty memory) adopts the containers and keeps the restart count.
    let again = shared(&h.api, h.fake.clone(), h._dir.path());
    let pod = h.get().await;
    again.sync(&pod).await.unwrap();
    assert!(
        h.fake.calls().iter().any(|c| c == "CreateContainer c#2"),
        "fresh memory has no back-off window"
    );
    assert_eq!(container(&h.get().await).restart_count, 2);

    // A container removed behind the kubelet's back is recreated.
    h.fake.remove_behind_back(&uid, "c");
    h.sync().await;
    assert_eq!(h.fake.running(&uid).len(), 1);

    // Graceful delete: containers stopped with the grace period, pod removed from the API.
    h.pods()
        .delete("p", &DeleteParams::default())
        .await
        .unwrap();
    let outcome = h.sync().await;
    assert!(outcome.done);
    assert!(
        h.fake
            .calls()
            .iter()
            .any(|c| c.starts_with("StopContainer") && c.ends_with(" 30"))
    );
    assert!(h.pods().get_opt("p").await.unwrap().is_none());
    assert!(h.fake.running(&uid).is_empty());
    // Events tell the story, as kubectl describe shows it (written in the background).
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(h.api.client(), "default");
    testkit::eventually(
        Duration::from_secs(10),
        "Pulled, Created, Started and Killing events",
        || async {
            let reasons: Vec<String> = events
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter_map(|e| e.reason)
                .collect();
            ["Pulled", "Created", "Started", "Killing"]
                .iter()
                .all(|r| reasons.iter().any(|x| x == r))
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn images_config_errors_and_completion() {
    let h = harness().await;
    // An image that is absent and cannot be pulled: ErrImagePull with the registry's error, then ImagePullBackOff.
    h.create(json!({"nodeName": "n1", "containers": [{"name": "c", "image": "nginx:1.25"}]}))
        .await;
    let outcome = h.sync().await;
    assert!(outcome.requeue_after.is_some());
    let pod = h.get().await;
    assert_eq!(waiting_reason(&pod).as_deref(), Some("ErrImagePull"));
    assert!(
        container(&pod)
            .state
            .unwrap()
            .waiting
            .unwrap()
            .message
            .unwrap()
            .contains("no such host")
    );
    assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Pending"));
    h.sync().await;
    assert_eq!(
        waiting_reason(&h.get().await).as_deref(),
        Some("ImagePullBackOff")
    );
    h.pods()
        .delete("p", &DeleteParams::default())
        .await
        .unwrap();
    h.sync().await;

    // imagePullPolicy Never with the image absent: no pull is even tried.
    let pulls_before = h
        .fake
        .calls()
        .iter()
        .filter(|c| c.starts_with("PullImage"))
        .count();
    h.create(json!({"nodeName": "n1", "containers": [{"name": "c", "image": "nginx:1.25", "imagePullPolicy": "Never"}]})).await;
    h.sync().await;
    assert_eq!(
        waiting_reason(&h.get().await).as_deref(),
        Some("ErrImageNeverPull")
    );
    assert_eq!(
        h.fake
            .calls()
            .iter()
            .filter(|c| c.starts_with("PullImage"))
            .count(),
        pulls_before
    );
    h.pods()
        .delete("p", &DeleteParams::default())
        .await
        .unwrap();
    h.sync().await;

    // A missing ConfigMap key: CreateContainerConfigError naming it.
    h.create(json!({"nodeName": "n1", "containers": [{"name": "c", "image": "busybox:1.36",
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "x"}}}]}]}))
    .await;
    h.sync().await;
    let pod = h.get().await;
    assert_eq!(
        waiting_reason(&pod).as_deref(),
        Some("CreateContainerConfigError")
    );
    assert_eq!(
        container(&pod)
            .state
            .unwrap()
            .waiting
            .unwrap()
            .message
            .as_deref(),
        Some("configmap \"settings\" not found")
    );
    h.pods()
        .delete("p", &DeleteParams::default())
        .await
        .unwrap();
    h.sync().await;

    // restartPolicy Never: a clean exit completes the pod and stops its sandbox.
    let uid = h
        .create(json!({"nodeName": "n1", "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36"}]}))
        .await
        .metadata
        .uid
        .unwrap();
    h.sync().await;
    h.fake.exit(&uid, "c", 0, "Completed");
    h.sync().await;
    let pod = h.get().await;
    assert_eq!(
        pod.status.as_ref().unwrap().phase.as_deref(),
        Some("Succeeded")
    );
    let term = container(&pod).state.unwrap().terminated.unwrap();
    assert_eq!(
        (term.exit_code, term.reason.as_deref()),
        (0, Some("Completed"))
    );
    h.sync().await;
    let rt = h.shared.runtime_pod(&uid).await.unwrap();
    let sandbox = rt.sandboxes[0].id.clone();
    let calls = |h: &Harness, verb: &str| {
        let call = format!("{verb} {sandbox}");
        h.fake.calls().iter().filter(|c| **c == call).count()
    };
    assert_eq!(calls(&h, "StopPodSandbox"), 1);

    // Removing it afterwards does not stop the stopped sandbox again (each StopPodSandbox
    // runs the CNI DEL chain in containerd), but removes it.
    h.shared.remove_pod(&rt).await.unwrap();
    assert_eq!(calls(&h, "StopPodSandbox"), 1);
    assert_eq!(calls(&h, "RemovePodSandbox"), 1);
    assert!(
        h.shared
            .runtime_pod(&uid)
            .await
            .unwrap()
            .sandboxes
            .is_empty()
    );
}

/// The pod as the API has it, with ephemeral containers as `kubectl debug` adds them (through
/// the `ephemeralcontainers` subresource; the worker only reads the spec it is given).
fn with_debuggers(mut pod: Pod) -> Pod {
    pod.spec.as_mut().unwrap().ephemeral_containers = Some(
        serde_json::from_value(json!([
            {"name": "debugger-abc", "image": "busybox:1.36", "targetContainerName": "app",
             "stdin": true, "tty": true, "terminationMessagePolicy": "File"},
            {"name": "shell", "image": "busybox:1.36", "command": ["sh"]},
            {"name": "absent", "image": "nginx:1.25", "imagePullPolicy": "Never"}
        ]))
        .unwrap(),
    );
    pod
}

fn ephemeral_status(pod: &Pod, name: &str) -> k8s_openapi::api::core::v1::ContainerStatus {
    let statuses = pod
        .status
        .as_ref()
        .unwrap()
        .ephemeral_container_statuses
        .as_ref();
    statuses
        .unwrap()
        .iter()
        .find(|s| s.name == name)
        .unwrap()
        .clone()
}

#[tokio::test]
async fn ephemeral_containers_start_once_beside_their_target() {
    let h = harness().await;
    let uid = h
        .create(json!({"nodeName": "n1", "containers": [{"name": "app", "image": "busybox:1.36"}]}))
        .await
        .metadata
        .uid
        .unwrap();
    h.sync().await;
    let app = h.fake.running(&uid)[0].0.clone();

    let outcome = h.shared.sync(&with_debuggers(h.get().await)).await.unwrap();
    assert_eq!(
        outcome.requeue_after,
        Some(Duration::from_secs(5)),
        "the absent image is tried again"
    );
    let created = |name: &str| {
        let call = format!("CreateContainer {name}#0");
        h.fake.calls().iter().filter(|c| **c == call).count()
    };
    assert_eq!((created("debugger-abc"), created("shell")), (1, 1));
    let running = h.fake.running(&uid);
    let id_of = |name: &str| running.iter().find(|(_, n)| n == name).unwrap().0.clone();
    let ns = |name: &str| {
        let config = h.fake.container_config(&id_of(name)).unwrap();
        let linux = config.linux.unwrap().security_context.unwrap();
        let ns = linux.namespace_options.unwrap();
        (ns.pid, ns.target_id, config.tty, config.stdin)
    };
    use k8s_cri::v1::NamespaceMode;
    assert_eq!(
        ns("debugger-abc"),
        (NamespaceMode::Target as i32, app.clone(), true, true)
    );
    assert_eq!(
        ns("shell"),
        (NamespaceMode::Container as i32, String::new(), false, false)
    );

    let pod = h.get().await;
    let dbg = ephemeral_status(&pod, "debugger-abc");
    assert!(dbg.state.as_ref().unwrap().running.is_some(), "{dbg:?}");
    assert_eq!(
        (dbg.ready, dbg.started, dbg.restart_count),
        (false, Some(true), 0)
    );
    assert_eq!(
        dbg.container_id,
        Some(format!("containerd://{}", id_of("debugger-abc")))
    );
    let absent = ephemeral_status(&pod, "absent");
    assert_eq!(
        absent.state.unwrap().waiting.unwrap().reason.as_deref(),
        Some("ErrImageNeverPull")
    );
    // The pod is what its own containers make it.
    let status = pod.status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert!(container(&pod).ready);

    // A debugger that exits stays exited; later syncs start nothing again.
    assert!(h.fake.exit(&uid, "debugger-abc", 0, "Completed"));
    h.shared.sync(&with_debuggers(h.get().await)).await.unwrap();
    h.shared.sync(&with_debuggers(h.get().await)).await.unwrap();
    assert_eq!((created("debugger-abc"), created("shell")), (1, 1));
    let dbg = ephemeral_status(&h.get().await, "debugger-abc");
    assert_eq!(dbg.state.unwrap().terminated.unwrap().exit_code, 0);

    // Deleting the pod stops its debuggers with it.
    h.pods()
        .delete("p", &DeleteParams::default())
        .await
        .unwrap();
    let outcome = h.shared.sync(&with_debuggers(h.get().await)).await.unwrap();
    assert!(outcome.done);
    assert!(h.fake.running(&uid).is_empty());
}

/// A pod on the host network has the node's IP, in its status and in its containers'
/// `status.podIP` (upstream sets it before starting them), and its sandbox no hostname.
#[tokio::test]
async fn host_network_pods_have_the_nodes_ip() {
    let h = harness().await;
    let uid = h
        .create(json!({"nodeName": "n1", "hostNetwork": true, "containers": [{
            "name": "c", "image": "busybox:1.36",
            "args": ["--listen=$(POD_IP):9090"],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]}))
        .await
        .metadata
        .uid
        .unwrap();
    h.sync().await;
    let status = h.get().await.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(status.pod_ip.as_deref(), Some("192.168.50.10"));
    let (id, _) = h.fake.running(&uid).pop().expect("the container runs");
    let config = h.fake.container_config(&id).unwrap();
    assert!(
        config
            .envs
            .iter()
            .any(|e| e.key == "POD_IP" && e.value == "192.168.50.10"),
        "{:?}",
        config.envs
    );
    assert_eq!(config.args, ["--listen=192.168.50.10:9090"]);
}
