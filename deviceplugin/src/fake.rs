//! A device plugin whose devices are files, for tests and for clusters without GPUs: the
//! whole framework (registration, health, allocation, checkpoints, PodResources) runs the
//! same with it as with a real one.
//!
//! Its state directory holds `devices/<id>` (one file per device, mounted into a container
//! that gets the device) and `unhealthy`, a file of device IDs (one per line or space
//! separated) that the plugin watches: listing an ID there makes that device Unhealthy,
//! removing it makes it Healthy again.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tonic::Status;

use crate::api::v1beta1::{
    ContainerAllocateResponse, Device, DevicePluginOptions, DeviceSpec, Mount,
};
use crate::dirwatch::DirWatch;
use crate::plugin::{self, Plugin, PluginError, ServeOptions};
use crate::{HEALTHY, UNHEALTHY};

/// The health file's name in the state directory.
pub const UNHEALTHY_FILE: &str = "unhealthy";
/// Where the device files go in a container: `<dir>/<id>`.
pub const CONTAINER_DIR: &str = "/dev/fake";
/// The annotation the runtime gets: `<resource>=<id>,<id>`.
pub const ANNOTATION: &str = "minik8s.io/fake-devices";

/// What `minik8s device-plugin fake` takes.
#[derive(Clone, Debug)]
pub struct FakeArgs {
    /// The extended resource, e.g. `example.com/dev`.
    pub resource: String,
    /// How many devices: IDs `dev-0` .. `dev-<count-1>`.
    pub count: usize,
    /// The kubelet's device-plugins directory.
    pub device_plugin_dir: PathBuf,
    /// Where the device files and the health file are.
    pub state_dir: PathBuf,
    /// Ask for PreStartContainer before each container start.
    pub pre_start_required: bool,
    /// Also hand each device file to the runtime as a device node (`DeviceSpec`): only for
    /// runtimes that take regular files (the kubelet's fake one); a real runtime wants device
    /// nodes.
    pub device_specs: bool,
}

impl FakeArgs {
    pub fn new(resource: &str, count: usize, device_plugin_dir: &Path, state_dir: &Path) -> Self {
        FakeArgs {
            resource: resource.into(),
            count,
            device_plugin_dir: device_plugin_dir.into(),
            state_dir: state_dir.into(),
            pre_start_required: false,
            device_specs: false,
        }
    }
}

/// The environment variable naming a container's devices: `example.com/dev` gives
/// `EXAMPLE_COM_DEV_VISIBLE_DEVICES` (as NVIDIA's `NVIDIA_VISIBLE_DEVICES`).
pub fn env_name(resource: &str) -> String {
    let stem: String = resource
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("{stem}_VISIBLE_DEVICES")
}

/// The fake plugin; keep it in an `Arc` to serve it.
pub struct FakePlugin {
    args: FakeArgs,
    ids: Vec<String>,
    devices: watch::Sender<Vec<Device>>,
    /// The device lists PreStartContainer was called with, in order.
    pre_started: Mutex<Vec<Vec<String>>>,
}

impl std::fmt::Debug for FakePlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakePlugin")
            .field("resource", &self.args.resource)
            .field("count", &self.ids.len())
            .finish_non_exhaustive()
    }
}

impl FakePlugin {
    /// Makes the device files and reads the health file.
    pub fn new(args: FakeArgs) -> io::Result<Arc<FakePlugin>> {
        let dir = args.state_dir.join("devices");
        std::fs::create_dir_all(&dir)?;
        let ids: Vec<String> = (0..args.count).map(|i| format!("dev-{i}")).collect();
        for id in &ids {
            std::fs::write(dir.join(id), format!("{} {id}\n", args.resource))?;
        }
        let (devices, _) = watch::channel(Vec::new());
        let plugin = Arc::new(FakePlugin {
            args,
            ids,
            devices,
            pre_started: Mutex::new(Vec::new()),
        });
        plugin.reload_health();
        Ok(plugin)
    }

    /// The file of device `id`.
    pub fn device_path(&self, id: &str) -> PathBuf {
        self.args.state_dir.join("devices").join(id)
    }

    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// The device lists PreStartContainer was called with.
    pub fn pre_started(&self) -> Vec<Vec<String>> {
        self.pre_started.lock().expect("fake plugin").clone()
    }

    fn unhealthy(&self) -> BTreeSet<String> {
        std::fs::read_to_string(self.args.state_dir.join(UNHEALTHY_FILE))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    /// Reads the health file and tells ListAndWatch when a device's health changed.
    fn reload_health(&self) {
        let unhealthy = self.unhealthy();
        let list: Vec<Device> = self
            .ids
            .iter()
            .map(|id| Device {
                id: id.clone(),
                health: if unhealthy.contains(id) {
                    UNHEALTHY
                } else {
                    HEALTHY
                }
                .into(),
                topology: None,
            })
            .collect();
        self.devices.send_if_modified(|current| {
            if *current == list {
                return false;
            }
            tracing::info!(resource = %self.args.resource, unhealthy = ?unhealthy, "device health changed");
            *current = list;
            true
        });
    }

    /// Follows the health file until an error.
    async fn watch_health(&self) -> io::Result<()> {
        let mut watch = DirWatch::new(&self.args.state_dir)?;
        // Changes made before the watch began are read now.
        self.reload_health();
        loop {
            let changes = watch.next().await?;
            if changes.iter().any(|c| c.name() == UNHEALTHY_FILE) {
                self.reload_health();
            }
        }
    }

    /// Serves the plugin, keeps it registered and follows its health file, until an error.
    pub async fn run(self: Arc<Self>) -> Result<(), PluginError> {
        let options = ServeOptions::new(&self.args.device_plugin_dir, &self.args.resource);
        let state_dir = self.args.state_dir.clone();
        let health = {
            let this = self.clone();
            async move {
                this.watch_health().await.map_err(|source| PluginError::Io {
                    path: state_dir,
                    source,
                })
            }
        };
        tokio::select! {
            r = plugin::serve(self.clone(), options) => r,
            r = health => r,
        }
    }
}

#[async_trait::async_trait]
impl Plugin for FakePlugin {
    fn resource_name(&self) -> String {
        self.args.resource.clone()
    }

    fn options(&self) -> DevicePluginOptions {
        DevicePluginOptions {
            pre_start_required: self.args.pre_start_required,
            get_preferred_allocation_available: true,
        }
    }

    fn devices(&self) -> watch::Receiver<Vec<Device>> {
        self.devices.subscribe()
    }

    async fn allocate(&self, device_ids: &[String]) -> Result<ContainerAllocateResponse, Status> {
        if let Some(unknown) = device_ids.iter().find(|id| !self.ids.contains(id)) {
            return Err(Status::invalid_argument(format!(
                "unknown device {unknown:?}"
            )));
        }
        let mounts = device_ids
            .iter()
            .map(|id| Mount {
                container_path: format!("{CONTAINER_DIR}/{id}"),
                host_path: self.device_path(id).display().to_string(),
                read_only: false,
            })
            .collect();
        let devices = if self.args.device_specs {
            device_ids
                .iter()
                .map(|id| DeviceSpec {
                    container_path: format!("{CONTAINER_DIR}/{id}"),
                    host_path: self.device_path(id).display().to_string(),
                    permissions: "rw".into(),
                })
                .collect()
        } else {
            Vec::new()
        };
        let ids = device_ids.join(",");
        Ok(ContainerAllocateResponse {
            envs: HashMap::from([(env_name(&self.args.resource), ids.clone())]),
            mounts,
            devices,
            annotations: HashMap::from([(
                ANNOTATION.to_string(),
                format!("{}={ids}", self.args.resource),
            )]),
            cdi_devices: Vec::new(),
        })
    }

    async fn pre_start_container(&self, device_ids: &[String]) -> Result<(), Status> {
        self.pre_started
            .lock()
            .expect("fake plugin")
            .push(device_ids.to_vec());
        Ok(())
    }
}

/// `minik8s device-plugin fake`: runs the fake plugin until an error.
pub async fn run_fake(args: FakeArgs) -> Result<(), PluginError> {
    let state_dir = args.state_dir.clone();
    let plugin = FakePlugin::new(args).map_err(|source| PluginError::Io {
        path: state_dir,
        source,
    })?;
    plugin.run().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names() {
        assert_eq!(
            env_name("example.com/dev"),
            "EXAMPLE_COM_DEV_VISIBLE_DEVICES"
        );
    }

    #[tokio::test]
    async fn health_follows_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let args = FakeArgs::new("example.com/dev", 2, &dir.path().join("dp"), dir.path());
        let plugin = FakePlugin::new(args).unwrap();
        let mut devices = plugin.devices();
        assert!(
            devices
                .borrow_and_update()
                .iter()
                .all(|d| d.health == HEALTHY)
        );
        let watching = tokio::spawn({
            let plugin = plugin.clone();
            async move { plugin.watch_health().await }
        });
        std::fs::write(dir.path().join(UNHEALTHY_FILE), "dev-1\n").unwrap();
        let list = devices
            .wait_for(|l| l.iter().any(|d| d.health == UNHEALTHY))
            .await
            .unwrap()
            .clone();
        assert_eq!(list[1].id, "dev-1");
        assert_eq!(list[1].health, UNHEALTHY);
        assert_eq!(list[0].health, HEALTHY);
        watching.abort();
    }

    #[tokio::test]
    async fn allocation_names_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let args = FakeArgs::new("example.com/dev", 2, &dir.path().join("dp"), dir.path());
        let plugin = FakePlugin::new(args).unwrap();
        let r = plugin.allocate(&["dev-1".into()]).await.unwrap();
        assert_eq!(r.envs["EXAMPLE_COM_DEV_VISIBLE_DEVICES"], "dev-1");
        assert_eq!(r.mounts[0].container_path, "/dev/fake/dev-1");
        assert!(Path::new(&r.mounts[0].host_path).exists());
        assert!(plugin.allocate(&["dev-9".into()]).await.is_err());
    }
}
