//! The device plugin framework end to end inside one process: the real kubelet (on the fake
//! runtime, in a tokio runtime of its own so that it can be killed and started again) against
//! an in-process API server, and the fake device plugin on a temporary directory, speaking
//! the upstream gRPC APIs over unix sockets. Registration, allocatable, allocation applied to
//! the CRI config, exclusivity, admission failures, health, kubelet and plugin restarts, and
//! the PodResources API.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use minik8s_deviceplugin::api::podresources::pod_resources_lister_client::PodResourcesListerClient;
use minik8s_deviceplugin::api::podresources::{
    AllocatableResourcesRequest, GetPodResourcesRequest, ListPodResourcesRequest,
};
use minik8s_deviceplugin::fake::{FakeArgs, FakePlugin, UNHEALTHY_FILE};
use minik8s_informers::Informers;
use minik8s_kubelet::devicemanager::checkpoint;
use minik8s_kubelet::runtime::fake::FakeRuntime;
use minik8s_kubelet::{Capacity, KubeletConfig, RunOptions, Sources};
use serde_json::json;
use testkit::{Backend, InProcess, eventually};

const WAIT: Duration = Duration::from_secs(30);
const RESOURCE: &str = "example.com/dev";
const NODE: &str = "n1";

/// A kubelet in its own tokio runtime: shutting the runtime down ends every task it started,
/// as a process exit would.
struct Kubelet {
    runtime: Option<tokio::runtime::Runtime>,
}

impl Kubelet {
    fn start(api: &InProcess, fake: Arc<FakeRuntime>, root: &Path) -> Kubelet {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let client = client_on_this_runtime(api);
        let mut config = KubeletConfig::new(
            NODE,
            "192.168.50.10".parse().unwrap(),
            root,
            root.join("none.sock"),
        );
        config.manage_host = false;
        config.cgroups_path = root.join("cgroup");
        config.node_status_update_frequency = Duration::from_secs(1);
        let options = RunOptions {
            serve_api: false,
            pod_network: None,
            capacity: Some(Capacity {
                cpus: 4,
                memory_bytes: 8 << 30,
                ephemeral_bytes: 100 << 30,
            }),
            device_plugins: true,
        };
        runtime.spawn(async move {
            let sources = Sources::own(&Informers::new(client.clone()), NODE);
            if let Err(e) = minik8s_kubelet::run_with(config, client, fake, sources, options).await
            {
                panic!("kubelet: {e}");
            }
        });
        Kubelet {
            runtime: Some(runtime),
        }
    }

    fn stop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A client for a kubelet runtime whose requests the API server serves on the test's runtime:
/// what the in-process server starts for a request (watch feeds) must outlive the kubelet.
fn client_on_this_runtime(api: &InProcess) -> kube::Client {
    let main = api.client();
    let handle = tokio::runtime::Handle::current();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let main = main.clone();
        let handle = handle.clone();
        async move {
            let response = handle.spawn(async move { main.send(req).await }).await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(response?)
        }
    });
    kube::Client::new(service, "default")
}

/// A fake plugin serving in a task of the test's runtime; dropping it stops it.
struct Plugin {
    plugin: Arc<FakePlugin>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Plugin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn plugin(root: &Path, count: usize) -> Plugin {
    let mut args = FakeArgs::new(
        RESOURCE,
        count,
        &root.join("device-plugins"),
        &root.join("fake-devices"),
    );
    args.pre_start_required = true;
    args.device_specs = true;
    let plugin = FakePlugin::new(args).unwrap();
    let task = tokio::spawn({
        let plugin = plugin.clone();
        async move {
            if let Err(e) = plugin.run().await {
                panic!("fake plugin: {e}");
            }
        }
    });
    Plugin { plugin, task }
}

struct Cluster {
    api: InProcess,
    fake: Arc<FakeRuntime>,
    root: tempfile::TempDir,
}

async fn cluster() -> Cluster {
    Cluster {
        api: InProcess::start(Backend::Sqlite).await.unwrap(),
        fake: Arc::new(FakeRuntime::with_images(&[
            "busybox:1.36",
            "registry.k8s.io/pause:3.9",
        ])),
        root: tempfile::tempdir().unwrap(),
    }
}

impl Cluster {
    fn root(&self) -> PathBuf {
        self.root.path().to_path_buf()
    }

    fn kubelet(&self) -> Kubelet {
        Kubelet::start(&self.api, self.fake.clone(), self.root.path())
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.api.client(), "default")
    }

    /// A pod on the node asking for `count` devices.
    async fn create(&self, name: &str, count: u32) -> Pod {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "nodeName": NODE,
                "restartPolicy": "Never",
                "containers": [{
                    "name": "c",
                    "image": "busybox:1.36",
                    "resources": {
                        "requests": {RESOURCE: count.to_string()},
                        "limits": {RESOURCE: count.to_string()},
                    },
                }],
            },
        }))
        .unwrap();
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap()
    }

    /// The node's (capacity, allocatable) of the resource, once it reports `want`.
    async fn wait_devices(&self, want: (&str, &str)) {
        let nodes: Api<Node> = Api::all(self.api.client());
        eventually(WAIT, &format!("node devices {want:?}"), || {
            let nodes = nodes.clone();
            async move {
                let node = nodes.get_opt(NODE).await.ok()??;
                let status = node.status?;
                let capacity = status.capacity?.get(RESOURCE)?.0.clone();
                let allocatable = status.allocatable?.get(RESOURCE)?.0.clone();
                (capacity == want.0 && allocatable == want.1).then_some(())
            }
        })
        .await
    }

    /// The container of a running pod, with the config it was created with.
    async fn running(&self, name: &str) -> k8s_cri::v1::ContainerConfig {
        let pod = self.pods().get(name).await.unwrap();
        let uid = pod.metadata.uid.unwrap();
        let fake = self.fake.clone();
        eventually(WAIT, &format!("pod {name} running"), || {
            let fake = fake.clone();
            let uid = uid.clone();
            async move {
                let (id, _) = fake.running(&uid).into_iter().next()?;
                fake.container_config(&id)
            }
        })
        .await
    }

    /// The status of a pod the kubelet rejected.
    async fn rejected(&self, name: &str) -> (String, String) {
        let pods = self.pods();
        eventually(WAIT, &format!("pod {name} rejected"), || {
            let pods = pods.clone();
            async move {
                let status = pods.get(name).await.ok()?.status?;
                (status.phase.as_deref() == Some("Failed")).then(|| {
                    (
                        status.reason.unwrap_or_default(),
                        status.message.unwrap_or_default(),
                    )
                })
            }
        })
        .await
    }

    async fn pod_resources(&self) -> PodResourcesListerClient<tonic::transport::Channel> {
        let socket = self.root.path().join("pod-resources/kubelet.sock");
        let channel = eventually(WAIT, "pod resources socket", || {
            let socket = socket.clone();
            async move { minik8s_deviceplugin::uds::connect(&socket).await.ok() }
        })
        .await;
        PodResourcesListerClient::new(channel)
    }

    /// Devices held per pod name, from PodResources List.
    async fn holders(&self) -> Vec<(String, Vec<String>)> {
        let list = self
            .pod_resources()
            .await
            .list(ListPodResourcesRequest {})
            .await
            .unwrap()
            .into_inner();
        let mut out: Vec<(String, Vec<String>)> = list
            .pod_resources
            .into_iter()
            .map(|p| {
                let ids = p
                    .containers
                    .iter()
                    .flat_map(|c| &c.devices)
                    .filter(|d| d.resource_name == RESOURCE)
                    .flat_map(|d| d.device_ids.clone())
                    .collect();
                (p.name, ids)
            })
            .collect();
        out.sort();
        out
    }
}

fn env(config: &k8s_cri::v1::ContainerConfig, key: &str) -> Option<String> {
    config
        .envs
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| kv.value.clone())
}

const ENV: &str = "EXAMPLE_COM_DEV_VISIBLE_DEVICES";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocation_is_exclusive_applied_and_listed() {
    let c = cluster().await;
    let _kubelet = c.kubelet();
    let p = plugin(&c.root(), 2);
    c.wait_devices(("2", "2")).await;

    c.create("a", 1).await;
    let a = c.running("a").await;
    let a_dev = env(&a, ENV).expect("device variable");
    // Allocate's answer applied to the CRI config: mount, device node, variable, annotation.
    let host = p.plugin.device_path(&a_dev).display().to_string();
    let path = format!("/dev/fake/{a_dev}");
    assert!(
        a.mounts
            .iter()
            .any(|m| m.container_path == path && m.host_path == host)
    );
    assert!(
        a.devices
            .iter()
            .any(|d| d.container_path == path && d.host_path == host && d.permissions == "rw")
    );
    assert_eq!(
        a.annotations["minik8s.io/fake-devices"],
        format!("{RESOURCE}={a_dev}")
    );
    // PreStartContainer was asked for, and called with the container's device.
    assert_eq!(p.plugin.pre_started(), vec![vec![a_dev.clone()]]);

    c.create("b", 1).await;
    let b_dev = env(&c.running("b").await, ENV).unwrap();
    assert_ne!(a_dev, b_dev, "two pods share a device");

    // No device left: rejected at admission, as upstream.
    c.create("c", 1).await;
    let (reason, message) = c.rejected("c").await;
    assert_eq!(reason, "UnexpectedAdmissionError");
    assert_eq!(
        message,
        "Pod was rejected: Allocate failed due to requested number of devices unavailable for example.com/dev. Requested: 1, Available: 0, which is unexpected"
    );

    // PodResources: who holds what, and every device.
    assert_eq!(
        c.holders().await,
        vec![
            ("a".to_string(), vec![a_dev.clone()]),
            ("b".to_string(), vec![b_dev.clone()])
        ]
    );
    let mut client = c.pod_resources().await;
    let all = client
        .get_allocatable_resources(AllocatableResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut ids: Vec<String> = all
        .devices
        .iter()
        .flat_map(|d| d.device_ids.clone())
        .collect();
    ids.sort();
    assert_eq!(ids, vec!["dev-0", "dev-1"]);
    let got = client
        .get(GetPodResourcesRequest {
            pod_name: "a".into(),
            pod_namespace: "default".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_resources
        .unwrap();
    assert_eq!(got.containers[0].name, "c");
    assert_eq!(got.containers[0].devices[0].device_ids, vec![a_dev.clone()]);

    // The checkpoint has both allocations, in upstream's shape.
    let data = checkpoint::read(&c.root().join("device-plugins"))
        .unwrap()
        .unwrap();
    assert_eq!(data.pod_device_entries.len(), 2);
    assert_eq!(data.registered_devices[RESOURCE].len(), 2);

    // A deleted pod's device goes to the next pod.
    c.pods()
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    let pods = c.pods();
    eventually(WAIT, "pod a gone", || {
        let pods = pods.clone();
        async move { pods.get_opt("a").await.ok()?.is_none().then_some(()) }
    })
    .await;
    c.create("d", 1).await;
    assert_eq!(env(&c.running("d").await, ENV).unwrap(), a_dev);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_devices_are_not_allocatable() {
    let c = cluster().await;
    let _kubelet = c.kubelet();
    let _p = plugin(&c.root(), 2);
    c.wait_devices(("2", "2")).await;

    std::fs::write(
        c.root().join("fake-devices").join(UNHEALTHY_FILE),
        "dev-0\n",
    )
    .unwrap();
    c.wait_devices(("2", "1")).await;
    c.create("a", 1).await;
    assert_eq!(env(&c.running("a").await, ENV).unwrap(), "dev-1");
    c.create("b", 1).await;
    let (_, message) = c.rejected("b").await;
    assert!(message.contains("Requested: 1, Available: 0"), "{message}");

    std::fs::write(
        c.root().join("fake-devices").join(UNHEALTHY_FILE),
        "dev-0 dev-1\n",
    )
    .unwrap();
    c.wait_devices(("2", "0")).await;
    c.create("c", 1).await;
    let (reason, message) = c.rejected("c").await;
    assert_eq!(reason, "UnexpectedAdmissionError");
    assert_eq!(
        message,
        "Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate unhealthy devices example.com/dev, which is unexpected"
    );

    // Healthy again.
    std::fs::write(c.root().join("fake-devices").join(UNHEALTHY_FILE), "").unwrap();
    c.wait_devices(("2", "2")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_keep_allocations_and_plugins_register_again() {
    testkit::init_tracing();
    let c = cluster().await;
    let mut kubelet = c.kubelet();
    let p = plugin(&c.root(), 2);
    c.wait_devices(("2", "2")).await;
    c.create("a", 1).await;
    let a_dev = env(&c.running("a").await, ENV).unwrap();

    // A kubelet restart: the plugin sees kubelet.sock made anew and registers again, and the
    // checkpoint keeps pod a's device.
    kubelet.stop();
    let _kubelet = c.kubelet();
    let socket = c.root().join("pod-resources/kubelet.sock");
    eventually(WAIT, "the new kubelet to know the plugin's devices", || {
        let socket = socket.clone();
        async move {
            let channel = minik8s_deviceplugin::uds::connect(&socket).await.ok()?;
            let all = PodResourcesListerClient::new(channel)
                .get_allocatable_resources(AllocatableResourcesRequest {})
                .await
                .ok()?
                .into_inner();
            (all.devices.len() == 2).then_some(())
        }
    })
    .await;
    assert_eq!(
        c.holders().await,
        vec![("a".to_string(), vec![a_dev.clone()])]
    );
    c.create("b", 1).await;
    let b_dev = env(&c.running("b").await, ENV).unwrap();
    assert_ne!(
        a_dev, b_dev,
        "the restarted kubelet gave away a held device"
    );
    c.create("c", 1).await;
    let (reason, _) = c.rejected("c").await;
    assert_eq!(reason, "UnexpectedAdmissionError");

    // The plugin goes: allocatable 0, capacity kept; it comes back and registers again.
    drop(p);
    c.wait_devices(("2", "0")).await;
    let _p = plugin(&c.root(), 2);
    c.wait_devices(("2", "2")).await;
}
