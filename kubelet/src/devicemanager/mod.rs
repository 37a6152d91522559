//! The device manager (upstream's `pkg/kubelet/cm/devicemanager`): device plugins register on
//! `<root>/device-plugins/kubelet.sock`; each plugin's ListAndWatch keeps its resource's
//! healthy and unhealthy devices, which become the Node's capacity (all) and allocatable
//! (healthy); a pod is admitted only once every container that asks for a device resource has
//! been given healthy devices no other live container holds (the plugin's Allocate answer is
//! kept and applied to the container's CRI config at each start); allocations are
//! checkpointed so a restarted kubelet keeps them; the PodResources API tells who holds what.
//!
//! One lock over all state; plugin calls are made outside it, with admissions serialized by
//! their own lock so that two pods never pick the same free device.

mod admit;
mod allocation;
pub mod checkpoint;
mod endpoint;
mod podresources;
mod registration;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tokio::net::UnixListener;
use tokio::sync::{mpsc, watch};
use tonic::transport::Channel;

use minik8s_deviceplugin::api::v1beta1::device_plugin_client::DevicePluginClient;
use minik8s_deviceplugin::api::v1beta1::{ContainerAllocateResponse, DevicePluginOptions};
use minik8s_deviceplugin::{DEVICE_PLUGINS_DIR, KUBELET_SOCKET, POD_RESOURCES_DIR};

pub use allocation::RunOptions;
use checkpoint::{CheckpointData, PodDevicesEntry};

/// How long a resource whose plugin went away stays in the node's capacity (allocatable 0)
/// before it is dropped: upstream's `endpointStopGracePeriod`.
pub const STOP_GRACE_PERIOD: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Why a pod could not get its devices: upstream's errors, which admission wraps as
/// `Allocate failed due to <this>, which is unexpected`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AllocateError(pub String);

/// The pods that may hold devices: this node's pods that have not finished.
pub type ActivePods = Arc<dyn Fn() -> Vec<Arc<Pod>> + Send + Sync>;

/// One resource's devices and the plugin serving them.
struct Resource {
    healthy: BTreeSet<String>,
    unhealthy: BTreeSet<String>,
    options: DevicePluginOptions,
    client: Option<DevicePluginClient<Channel>>,
    /// The registration now serving the resource: an older one's stream ending changes
    /// nothing.
    generation: u64,
    /// When its plugin went away; `None` while it serves.
    stopped_at: Option<tokio::time::Instant>,
}

impl Resource {
    fn stopped(now: tokio::time::Instant) -> Resource {
        Resource {
            healthy: BTreeSet::new(),
            unhealthy: BTreeSet::new(),
            options: DevicePluginOptions::default(),
            client: None,
            generation: 0,
            stopped_at: Some(now),
        }
    }
}

/// Devices given to one container for one resource.
#[derive(Clone, Debug, PartialEq)]
struct Allocation {
    ids: Vec<String>,
    response: ContainerAllocateResponse,
}

/// By pod UID, container name, resource.
type PodDevices = BTreeMap<String, BTreeMap<String, BTreeMap<String, Allocation>>>;

#[derive(Default)]
struct State {
    resources: BTreeMap<String, Resource>,
    pods: PodDevices,
    next_generation: u64,
}

impl State {
    /// Devices of `resource` held by containers other than those `except` names.
    fn in_use(&self, resource: &str, except: impl Fn(&str, &str) -> bool) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for (uid, containers) in &self.pods {
            for (name, resources) in containers {
                if except(uid, name) {
                    continue;
                }
                if let Some(a) = resources.get(resource) {
                    out.extend(a.ids.iter().cloned());
                }
            }
        }
        out
    }

    fn checkpoint(&self) -> CheckpointData {
        let mut entries = Vec::new();
        for (uid, containers) in &self.pods {
            for (name, resources) in containers {
                for (resource, a) in resources {
                    entries.push(PodDevicesEntry::new(
                        uid,
                        name,
                        resource,
                        &a.ids,
                        &a.response,
                    ));
                }
            }
        }
        CheckpointData {
            pod_device_entries: entries,
            registered_devices: self
                .resources
                .iter()
                .map(|(name, r)| (name.clone(), r.healthy.iter().cloned().collect()))
                .collect(),
        }
    }
}

/// The kubelet's device manager; see the module docs.
pub struct DeviceManager {
    /// `<root>/device-plugins`.
    dir: PathBuf,
    state: Mutex<State>,
    /// Serializes admissions (the plugin calls between picking devices and recording them).
    admitting: tokio::sync::Mutex<()>,
    /// Bumped whenever capacity or allocatable may have changed.
    changes: watch::Sender<u64>,
    active: Mutex<Option<ActivePods>>,
    /// Plugin connections to run, for [`DeviceManager::run`].
    spawn: mpsc::UnboundedSender<BoxFuture<'static, ()>>,
    pending: Mutex<Option<Pending>>,
    grace: Duration,
}

/// What [`DeviceManager::run`] takes over.
struct Pending {
    registration: UnixListener,
    pod_resources: UnixListener,
    spawned: mpsc::UnboundedReceiver<BoxFuture<'static, ()>>,
}

impl std::fmt::Debug for DeviceManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceManager")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// The device-plugins directory under a kubelet root.
pub fn plugins_dir(root: &Path) -> PathBuf {
    root.join(DEVICE_PLUGINS_DIR)
}

/// The PodResources socket under a kubelet root.
pub fn pod_resources_socket(root: &Path) -> PathBuf {
    root.join(POD_RESOURCES_DIR).join(KUBELET_SOCKET)
}

impl DeviceManager {
    /// Reads the checkpoint, clears the stale sockets (plugins see their socket go and the
    /// kubelet's come back, and register again) and listens on the Registration and
    /// PodResources sockets. Serving starts with [`DeviceManager::run`].
    pub fn start(root: &Path) -> Result<Arc<DeviceManager>, DeviceError> {
        Self::start_with_grace(root, STOP_GRACE_PERIOD)
    }

    /// [`DeviceManager::start`] with another grace period for resources whose plugin left.
    pub fn start_with_grace(
        root: &Path,
        grace: Duration,
    ) -> Result<Arc<DeviceManager>, DeviceError> {
        let dir = plugins_dir(root);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| DeviceError::Io { path, source }
        };
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let mut state = State::default();
        match checkpoint::read(&dir) {
            Ok(Some(data)) => {
                let now = tokio::time::Instant::now();
                for name in data.registered_devices.keys() {
                    state.resources.insert(name.clone(), Resource::stopped(now));
                }
                for e in data.pod_device_entries {
                    let a = Allocation {
                        ids: e.ids(),
                        response: e.response(),
                    };
                    state
                        .pods
                        .entry(e.pod_uid.clone())
                        .or_default()
                        .entry(e.container_name.clone())
                        .or_default()
                        .insert(e.resource_name.clone(), a);
                }
                tracing::info!(
                    pods = state.pods.len(),
                    "device allocations restored from the checkpoint"
                );
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "the device manager checkpoint could not be read; starting without it")
            }
        }
        // Upstream removes everything but the checkpoint: the sockets of plugins that served
        // the previous kubelet. A plugin sees the new kubelet.sock and registers again.
        for entry in std::fs::read_dir(&dir).map_err(io(&dir))?.flatten() {
            if entry.file_name() != checkpoint::FILE && !entry.path().is_dir() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let pr_socket = pod_resources_socket(root);
        let pod_resources = minik8s_deviceplugin::uds::bind(&pr_socket).map_err(io(&pr_socket))?;
        let kubelet_socket = dir.join(KUBELET_SOCKET);
        let registration =
            minik8s_deviceplugin::uds::bind(&kubelet_socket).map_err(io(&kubelet_socket))?;
        let (spawn, spawned) = mpsc::unbounded_channel();
        Ok(Arc::new(DeviceManager {
            dir,
            state: Mutex::new(state),
            admitting: tokio::sync::Mutex::new(()),
            changes: watch::channel(0).0,
            active: Mutex::new(None),
            spawn,
            pending: Mutex::new(Some(Pending {
                registration,
                pod_resources,
                spawned,
            })),
            grace,
        }))
    }

    /// Serves registrations and PodResources and runs the plugins' connections, until the
    /// returned future is dropped (which ends them all).
    pub async fn run(self: Arc<Self>) {
        let Some(pending) = self.pending.lock().expect("device manager").take() else {
            return;
        };
        let Pending {
            registration,
            pod_resources,
            mut spawned,
        } = pending;
        let registration = registration::serve(self.clone(), registration);
        let pod_resources = podresources::serve(self.clone(), pod_resources);
        let connections = async move {
            let mut tasks = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    Some(task) = spawned.recv() => { tasks.spawn(task); }
                    Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                    else => break,
                }
            }
        };
        tokio::join!(registration, pod_resources, connections);
    }

    /// Where the pods that may hold devices come from (set by the pod manager).
    pub fn set_active_pods(&self, active: ActivePods) {
        *self.active.lock().expect("device manager") = Some(active);
    }

    fn active_pods(&self) -> Option<Vec<Arc<Pod>>> {
        let f = self.active.lock().expect("device manager").clone()?;
        Some(f())
    }

    /// A receiver that sees a change whenever capacity or allocatable may have changed.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    fn save(&self, state: &State) {
        if let Err(e) = checkpoint::write(&self.dir, &state.checkpoint()) {
            tracing::warn!(error = %e, "writing the device manager checkpoint failed");
        }
    }

    /// Capacity (every device) and allocatable (healthy devices) per resource, dropping
    /// resources whose plugin has been gone past the grace period.
    pub fn resources(&self) -> (BTreeMap<String, Quantity>, BTreeMap<String, Quantity>) {
        let now = tokio::time::Instant::now();
        let mut state = self.state.lock().expect("device manager");
        let grace = self.grace;
        let before = state.resources.len();
        state
            .resources
            .retain(|_, r| r.stopped_at.is_none_or(|at| now.duration_since(at) < grace));
        if state.resources.len() != before {
            self.save(&state);
        }
        let mut capacity = BTreeMap::new();
        let mut allocatable = BTreeMap::new();
        for (name, r) in &state.resources {
            let all = r.healthy.len() + r.unhealthy.len();
            capacity.insert(name.clone(), Quantity(all.to_string()));
            allocatable.insert(name.clone(), Quantity(r.healthy.len().to_string()));
        }
        (capacity, allocatable)
    }

    /// Whether `resource` is served by a device plugin (now or before a restart).
    pub fn is_device_resource(&self, resource: &str) -> bool {
        let state = self.state.lock().expect("device manager");
        state.resources.contains_key(resource)
    }

    /// Frees the devices of a pod that finished or is gone.
    pub fn release(&self, pod_uid: &str) {
        let mut state = self.state.lock().expect("device manager");
        if state.pods.remove(pod_uid).is_some() {
            tracing::info!(%pod_uid, "devices released");
            self.save(&state);
            drop(state);
            self.changed();
        }
    }

    /// Forgets the allocations of pods no longer active (finished, or deleted while the
    /// kubelet was down): upstream's `UpdateAllocatedDevices`.
    fn release_inactive(&self) {
        let Some(active) = self.active_pods() else {
            return;
        };
        let live: BTreeSet<String> = active
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        let mut state = self.state.lock().expect("device manager");
        let before = state.pods.len();
        state.pods.retain(|uid, _| live.contains(uid));
        if state.pods.len() != before {
            tracing::info!(
                released = before - state.pods.len(),
                "devices of inactive pods released"
            );
            self.save(&state);
        }
    }

    /// The devices each of a pod's containers holds, by container, then resource.
    pub fn pod_devices(&self, pod_uid: &str) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
        let state = self.state.lock().expect("device manager");
        state
            .pods
            .get(pod_uid)
            .map(|containers| {
                containers
                    .iter()
                    .map(|(c, resources)| {
                        let r = resources
                            .iter()
                            .map(|(name, a)| (name.clone(), a.ids.clone()))
                            .collect();
                        (c.clone(), r)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every device the plugins advertise, healthy or not, by resource.
    pub fn all_devices(&self) -> BTreeMap<String, Vec<String>> {
        let state = self.state.lock().expect("device manager");
        state
            .resources
            .iter()
            .map(|(name, r)| {
                (
                    name.clone(),
                    r.healthy.union(&r.unhealthy).cloned().collect(),
                )
            })
            .collect()
    }
}
