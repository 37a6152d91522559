//! The built-in NVIDIA device plugin (`nvidia.com/gpu`): what NVIDIA's own plugin and its
//! container toolkit do together, without the toolkit's runtime hook. A container given GPUs
//! gets exactly their device nodes, the driver's control devices, and the driver's user-space
//! libraries and tools mounted read-only from the host at the paths they have there, so a
//! CUDA program in any image with a libc finds the driver that matches the kernel module; a
//! GPU it was not given has no device node in it and cannot be opened (nor is it allowed by
//! the container's device cgroup).
//!
//! Everything is looked up under a root directory (`/` on a node), so tests run on a tree of
//! plain files. GPUs come from `/dev/nvidia<minor>`, named by the UUIDs the driver reports in
//! `/proc/driver/nvidia/gpus/*/information` or `nvidia-smi -L`, else by minor number. A GPU
//! whose device node disappears turns Unhealthy (followed through inotify on `/dev`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;
use tonic::Status;

use crate::api::v1beta1::{
    ContainerAllocateResponse, Device, DevicePluginOptions, DeviceSpec, Mount,
};
use crate::dirwatch::DirWatch;
use crate::plugin::{self, Plugin, PluginError, ServeOptions};
use crate::{HEALTHY, UNHEALTHY};

/// The resource the plugin advertises.
pub const RESOURCE: &str = "nvidia.com/gpu";
/// The variable naming a container's GPUs, as NVIDIA's plugin sets it (UUIDs, or indices).
pub const VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";
/// Device nodes every GPU container needs besides its GPUs', when the host has them.
const CONTROL_DEVICES: &[&str] = &[
    "nvidiactl",
    "nvidia-uvm",
    "nvidia-uvm-tools",
    "nvidia-modeset",
];
/// Where drivers install their libraries (64-bit only: 32-bit ones are not mounted), beside
/// what `ldconfig -p` knows: Debian's packages, NVIDIA's `.run` installer, and the
/// `/usr/local/nvidia` driver root of GPU clouds' node images.
const LIBRARY_DIRS: &[&str] = &[
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/x86_64-linux-gnu/nvidia/current",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "usr/local/nvidia/lib64",
    "usr/local/nvidia/lib",
];
/// The library name stems the toolkit mounts for the `compute` and `utility` capabilities
/// (its default), and video decoding.
const LIBRARY_STEMS: &[&str] = &[
    "libnvidia-",
    "libcuda.so",
    "libcudadebugger.so",
    "libnvcuvid.so",
    "libnvoptix.so",
];
const BINARY_DIRS: &[&str] = &["usr/bin", "usr/local/nvidia/bin", "usr/sbin", "bin"];
const BINARIES: &[&str] = &[
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
];
/// Directories every glibc searches already: no `LD_LIBRARY_PATH` is set for these.
const DEFAULT_LIBRARY_DIRS: &[&str] = &[
    "/lib",
    "/usr/lib",
    "/lib64",
    "/usr/lib64",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
];

/// What `minik8s device-plugin nvidia` takes.
#[derive(Clone, Debug)]
pub struct NvidiaArgs {
    /// Where the host's files are looked up: `/` on a node.
    pub root: PathBuf,
    /// The kubelet's device-plugins directory.
    pub device_plugin_dir: PathBuf,
}

/// One GPU: its device node's minor number and the ID the plugin gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    pub minor: u32,
    /// The driver's UUID (`GPU-…`) when known, else the minor number.
    pub id: String,
    pub model: Option<String>,
}

/// What the driver puts in every GPU container, as paths inside the container (the same as
/// on the host, less the root).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Driver {
    pub control_devices: Vec<String>,
    pub libraries: Vec<String>,
    pub binaries: Vec<String>,
}

impl Driver {
    /// `LD_LIBRARY_PATH` for the libraries outside the directories glibc searches anyway.
    pub fn library_path(&self) -> Option<String> {
        let dirs: BTreeSet<&str> = self
            .libraries
            .iter()
            .filter_map(|l| Path::new(l).parent()?.to_str())
            .filter(|d| !DEFAULT_LIBRARY_DIRS.contains(d))
            .collect();
        (!dirs.is_empty()).then(|| dirs.into_iter().collect::<Vec<_>>().join(":"))
    }
}

/// The minor numbers of the GPU device nodes under `<root>/dev`, in order.
pub fn device_minors(root: &Path) -> io::Result<Vec<u32>> {
    let mut minors: Vec<u32> = match std::fs::read_dir(root.join("dev")) {
        Ok(entries) => entries
            .filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_prefix("nvidia")?
                    .parse()
                    .ok()
            })
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    minors.sort_unstable();
    Ok(minors)
}

/// `(minor, uuid, model)` from the driver's `/proc/driver/nvidia/gpus/<bus id>/information`.
fn proc_information(text: &str) -> Option<(u32, String, Option<String>)> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    let minor = field("Device Minor")?.parse().ok()?;
    Some((minor, field("GPU UUID")?, field("Model")))
}

/// `(index, uuid, model)` from `nvidia-smi -L`: `GPU 0: NVIDIA H200 (UUID: GPU-…)`. MIG
/// devices (indented `MIG …` lines) are not GPUs of their own here.
pub fn parse_smi_list(out: &str) -> Vec<(u32, String, String)> {
    out.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("GPU ")?;
            let (index, rest) = rest.split_once(": ")?;
            let (model, uuid) = rest.rsplit_once(" (UUID: ")?;
            Some((
                index.parse().ok()?,
                uuid.strip_suffix(')')?.to_string(),
                model.to_string(),
            ))
        })
        .collect()
}

fn run_smi_list(root: &Path) -> Option<String> {
    let program = BINARY_DIRS
        .iter()
        .map(|d| root.join(d).join("nvidia-smi"))
        .find(|p| p.is_file())?;
    let out = std::process::Command::new(program)
        .arg("-L")
        .output()
        .ok()?;
    if !out.status.success() {
        tracing::warn!(stderr = %String::from_utf8_lossy(&out.stderr).trim(), "nvidia-smi -L failed");
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The GPUs under `root`: one per device node, named by UUID when the driver says which is
/// which (its proc files give each UUID's minor; `nvidia-smi -L` numbers GPUs in the order of
/// their minors on a node without MIG or hidden GPUs, which is how it is matched).
pub fn discover_gpus(root: &Path) -> io::Result<Vec<Gpu>> {
    let minors = device_minors(root)?;
    let mut known: BTreeMap<u32, (String, Option<String>)> = BTreeMap::new();
    if let Ok(dirs) = std::fs::read_dir(root.join("proc/driver/nvidia/gpus")) {
        for dir in dirs.flatten() {
            let text = std::fs::read_to_string(dir.path().join("information")).unwrap_or_default();
            if let Some((minor, uuid, model)) = proc_information(&text) {
                known.insert(minor, (uuid, model));
            }
        }
    }
    if known.is_empty()
        && let Some(out) = run_smi_list(root)
    {
        for ((_, uuid, model), minor) in parse_smi_list(&out).into_iter().zip(&minors) {
            known.insert(*minor, (uuid, Some(model)));
        }
    }
    Ok(minors
        .into_iter()
        .map(|minor| match known.remove(&minor) {
            Some((uuid, model)) => Gpu {
                minor,
                id: uuid,
                model,
            },
            None => Gpu {
                minor,
                id: minor.to_string(),
                model: None,
            },
        })
        .collect())
}

/// The 64-bit library paths in `ldconfig -p` output.
pub fn parse_ldconfig(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| {
            let (left, path) = l.split_once(" => ")?;
            let arch = left.rsplit_once('(')?.1;
            (arch.contains("x86-64") || arch.contains("AArch64")).then(|| path.trim().to_string())
        })
        .collect()
}

fn is_driver_library(name: &str) -> bool {
    LIBRARY_STEMS.iter().any(|s| name.starts_with(s)) && name.contains(".so")
}

/// The driver's control devices, libraries and binaries under `root`. On the real root the
/// libraries `ldconfig -p` lists count too.
pub fn discover_driver(root: &Path) -> Driver {
    let inside = |p: &Path| -> Option<String> {
        let rel = p.strip_prefix(root).ok()?;
        Some(format!("/{}", rel.to_str()?))
    };
    let control_devices = CONTROL_DEVICES
        .iter()
        .map(|d| root.join("dev").join(d))
        .filter(|p| p.exists())
        .filter_map(|p| inside(&p))
        .collect();
    let mut libraries = BTreeSet::new();
    if root == Path::new("/") {
        for ldconfig in ["/sbin/ldconfig", "/usr/sbin/ldconfig"] {
            if let Ok(out) = std::process::Command::new(ldconfig).arg("-p").output() {
                let listed = parse_ldconfig(&String::from_utf8_lossy(&out.stdout));
                libraries.extend(listed.into_iter().filter(|p| {
                    Path::new(p)
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(is_driver_library)
                }));
                break;
            }
        }
    }
    for dir in LIBRARY_DIRS {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let keep = e.file_name().to_str().is_some_and(is_driver_library)
                && e.path().metadata().is_ok_and(|m| m.is_file());
            if keep && let Some(p) = inside(&e.path()) {
                libraries.insert(p);
            }
        }
    }
    let mut binaries = Vec::new();
    for name in BINARIES {
        if let Some(p) = BINARY_DIRS
            .iter()
            .map(|d| root.join(d).join(name))
            .find(|p| p.is_file())
            .and_then(|p| inside(&p))
        {
            binaries.push(p);
        }
    }
    Driver {
        control_devices,
        libraries: libraries.into_iter().collect(),
        binaries,
    }
}

/// The plugin; keep it in an `Arc` to serve it.
#[derive(Debug)]
pub struct NvidiaPlugin {
    args: NvidiaArgs,
    gpus: Vec<Gpu>,
    driver: Driver,
    devices: watch::Sender<Vec<Device>>,
}

impl NvidiaPlugin {
    /// Finds the GPUs and the driver's files.
    pub fn new(args: NvidiaArgs) -> io::Result<Arc<NvidiaPlugin>> {
        let gpus = discover_gpus(&args.root)?;
        let driver = discover_driver(&args.root);
        tracing::info!(
            gpus = ?gpus.iter().map(|g| &g.id).collect::<Vec<_>>(),
            libraries = driver.libraries.len(),
            binaries = ?driver.binaries,
            "NVIDIA devices found"
        );
        let (devices, _) = watch::channel(Vec::new());
        let plugin = Arc::new(NvidiaPlugin {
            args,
            gpus,
            driver,
            devices,
        });
        plugin.reload_health();
        Ok(plugin)
    }

    pub fn gpus(&self) -> &[Gpu] {
        &self.gpus
    }

    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    fn host_path(&self, inside: &str) -> String {
        self.args
            .root
            .join(inside.trim_start_matches('/'))
            .display()
            .to_string()
    }

    /// A GPU whose device node is gone is Unhealthy.
    fn reload_health(&self) {
        let dev = self.args.root.join("dev");
        let list: Vec<Device> = self
            .gpus
            .iter()
            .map(|g| Device {
                id: g.id.clone(),
                health: if dev.join(format!("nvidia{}", g.minor)).exists() {
                    HEALTHY
                } else {
                    UNHEALTHY
                }
                .into(),
                topology: None,
            })
            .collect();
        self.devices.send_if_modified(|current| {
            if *current == list {
                return false;
            }
            tracing::info!(devices = ?list, "GPU health changed");
            *current = list;
            true
        });
    }

    async fn watch_health(&self) -> io::Result<()> {
        let mut watch = DirWatch::new(&self.args.root.join("dev"))?;
        self.reload_health();
        loop {
            let changes = watch.next().await?;
            if changes.iter().any(|c| c.name().starts_with("nvidia")) {
                self.reload_health();
            }
        }
    }

    /// Serves the plugin and keeps it registered, following device health, until an error.
    pub async fn run(self: Arc<Self>) -> Result<(), PluginError> {
        let options = ServeOptions::new(&self.args.device_plugin_dir, RESOURCE);
        let dev = self.args.root.join("dev");
        let health = {
            let this = self.clone();
            async move {
                this.watch_health()
                    .await
                    .map_err(|source| PluginError::Io { path: dev, source })
            }
        };
        tokio::select! {
            r = plugin::serve(self.clone(), options) => r,
            r = health => r,
        }
    }
}

#[async_trait::async_trait]
impl Plugin for NvidiaPlugin {
    fn resource_name(&self) -> String {
        RESOURCE.into()
    }

    fn options(&self) -> DevicePluginOptions {
        DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: false,
        }
    }

    fn devices(&self) -> watch::Receiver<Vec<Device>> {
        self.devices.subscribe()
    }

    async fn allocate(&self, device_ids: &[String]) -> Result<ContainerAllocateResponse, Status> {
        let device = |inside: &str| DeviceSpec {
            container_path: inside.to_string(),
            host_path: self.host_path(inside),
            permissions: "rw".into(),
        };
        let mut devices = Vec::new();
        for id in device_ids {
            let gpu = self
                .gpus
                .iter()
                .find(|g| g.id == *id)
                .ok_or_else(|| Status::invalid_argument(format!("unknown device {id:?}")))?;
            devices.push(device(&format!("/dev/nvidia{}", gpu.minor)));
        }
        devices.extend(self.driver.control_devices.iter().map(|d| device(d)));
        let mounts = self
            .driver
            .libraries
            .iter()
            .chain(&self.driver.binaries)
            .map(|p| Mount {
                container_path: p.clone(),
                host_path: self.host_path(p),
                read_only: true,
            })
            .collect();
        let mut envs = HashMap::from([(VISIBLE_DEVICES.to_string(), device_ids.join(","))]);
        if let Some(path) = self.driver.library_path() {
            envs.insert("LD_LIBRARY_PATH".into(), path);
        }
        Ok(ContainerAllocateResponse {
            envs,
            mounts,
            devices,
            annotations: HashMap::new(),
            cdi_devices: Vec::new(),
        })
    }
}

/// Whether the node has NVIDIA GPUs: `/dev/nvidia0` or another GPU node under `root`.
pub fn present(root: &Path) -> bool {
    device_minors(root).is_ok_and(|m| !m.is_empty())
}

/// `minik8s device-plugin nvidia`: runs the plugin until an error.
pub async fn run_nvidia(args: NvidiaArgs) -> Result<(), PluginError> {
    let root = args.root.clone();
    let plugin = NvidiaPlugin::new(args).map_err(|source| PluginError::Io {
        path: root.join("dev"),
        source,
    })?;
    plugin.run().await
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    const UUID0: &str = "GPU-11111111-2222-3333-4444-555555555555";
    const UUID1: &str = "GPU-66666666-7777-8888-9999-000000000000";

    fn touch(root: &Path, rel: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "").unwrap();
    }

    /// A host with two GPUs, the control devices but modeset, and a Debian-style driver.
    fn host() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in [
            "nvidia0",
            "nvidia1",
            "nvidiactl",
            "nvidia-uvm",
            "nvidia-uvm-tools",
            "null",
        ] {
            touch(root, &format!("dev/{d}"));
        }
        let libs = root.join("usr/lib/x86_64-linux-gnu");
        for l in [
            "libcuda.so.550.54.15",
            "libnvidia-ml.so.550.54.15",
            "libc.so.6",
        ] {
            touch(root, &format!("usr/lib/x86_64-linux-gnu/{l}"));
        }
        symlink("libcuda.so.550.54.15", libs.join("libcuda.so.1")).unwrap();
        symlink("libnvidia-ml.so.550.54.15", libs.join("libnvidia-ml.so.1")).unwrap();
        // A dangling link (a package half removed) is not mounted.
        symlink("gone.so", libs.join("libnvidia-gone.so.1")).unwrap();
        touch(root, "usr/local/nvidia/lib64/libnvidia-ptxjitcompiler.so.1");
        touch(root, "usr/bin/nvidia-debugdump");
        touch(root, "usr/bin/bash");
        dir
    }

    /// A script standing in for `nvidia-smi`. It is written by a child process, never
    /// through a descriptor of this one: a test thread forking meanwhile would inherit a
    /// descriptor open for writing, and running the script would then fail with ETXTBSY.
    fn fake_smi(root: &Path, out: &str) {
        let p = root.join("usr/bin/nvidia-smi");
        let script = format!("#!/bin/sh\ncat <<'EOF'\n{out}\nEOF\n");
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"printf '%s' "$1" > "$2" && chmod 755 "$2""#)
            .arg("sh")
            .arg(&script)
            .arg(&p)
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn plugin(root: &Path) -> Arc<NvidiaPlugin> {
        NvidiaPlugin::new(NvidiaArgs {
            root: root.into(),
            device_plugin_dir: root.join("dp"),
        })
        .unwrap()
    }

    #[test]
    fn gpus_are_named_by_minor_without_the_driver_tools() {
        let dir = host();
        assert!(present(dir.path()));
        let gpus = discover_gpus(dir.path()).unwrap();
        assert_eq!(
            gpus.iter()
                .map(|g| (g.minor, g.id.as_str()))
                .collect::<Vec<_>>(),
            [(0, "0"), (1, "1")]
        );
        assert!(!present(&dir.path().join("nowhere")));
    }

    #[test]
    fn gpus_are_named_by_uuid_from_nvidia_smi() {
        let dir = host();
        fake_smi(
            dir.path(),
            &format!(
                "GPU 0: NVIDIA H200 (UUID: {UUID0})\nGPU 1: NVIDIA H200 (UUID: {UUID1})\n  MIG 1g.18gb     Device  0: (UUID: MIG-abc)"
            ),
        );
        let gpus = discover_gpus(dir.path()).unwrap();
        assert_eq!(gpus[0].id, UUID0);
        assert_eq!(gpus[1].id, UUID1);
        assert_eq!(gpus[1].model.as_deref(), Some("NVIDIA H200"));
    }

    #[test]
    fn the_drivers_proc_files_say_which_minor_has_which_uuid() {
        let dir = host();
        let info = |minor: u32, uuid: &str| {
            format!(
                "Model: \t\t NVIDIA H200\nIRQ:   \t\t 42\nGPU UUID: \t {uuid}\nBus Location: \t 0000:0{minor}:00.0\nDevice Minor: \t {minor}\n"
            )
        };
        for (bus, minor, uuid) in [("0000:01:00.0", 1, UUID1), ("0000:00:00.0", 0, UUID0)] {
            let d = dir.path().join("proc/driver/nvidia/gpus").join(bus);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("information"), info(minor, uuid)).unwrap();
        }
        let gpus = discover_gpus(dir.path()).unwrap();
        assert_eq!(
            gpus[0],
            Gpu {
                minor: 0,
                id: UUID0.into(),
                model: Some("NVIDIA H200".into())
            }
        );
        assert_eq!(gpus[1].id, UUID1);
    }

    #[test]
    fn the_driver_is_found_as_the_toolkit_finds_it() {
        let dir = host();
        let driver = discover_driver(dir.path());
        assert_eq!(
            driver.control_devices,
            ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
        );
        assert_eq!(
            driver.libraries,
            [
                "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
                "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15",
                "/usr/local/nvidia/lib64/libnvidia-ptxjitcompiler.so.1",
            ]
        );
        assert_eq!(driver.binaries, ["/usr/bin/nvidia-debugdump"]);
        assert_eq!(
            driver.library_path().as_deref(),
            Some("/usr/local/nvidia/lib64")
        );
    }

    #[test]
    fn ldconfig_output() {
        let out = "3 libs found in cache `/etc/ld.so.cache'\n\
            \tlibcuda.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so.1\n\
            \tlibcuda.so.1 (libc6) => /usr/lib32/libcuda.so.1\n\
            \tlibnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\n";
        assert_eq!(
            parse_ldconfig(out),
            [
                "/lib/x86_64-linux-gnu/libcuda.so.1",
                "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
            ]
        );
    }

    #[tokio::test]
    async fn a_container_gets_its_gpus_and_the_driver() {
        let dir = host();
        fake_smi(
            dir.path(),
            &format!("GPU 0: NVIDIA H200 (UUID: {UUID0})\nGPU 1: NVIDIA H200 (UUID: {UUID1})"),
        );
        let plugin = plugin(dir.path());
        let r = plugin.allocate(&[UUID1.to_string()]).await.unwrap();
        let root = dir.path().display().to_string();
        let devices: Vec<(String, String)> = r
            .devices
            .iter()
            .map(|d| {
                (
                    d.container_path.clone(),
                    d.host_path.replace(&root, "<root>"),
                )
            })
            .collect();
        assert_eq!(
            devices,
            [
                ("/dev/nvidia1".to_string(), "<root>/dev/nvidia1".to_string()),
                ("/dev/nvidiactl".into(), "<root>/dev/nvidiactl".into()),
                ("/dev/nvidia-uvm".into(), "<root>/dev/nvidia-uvm".into()),
                (
                    "/dev/nvidia-uvm-tools".into(),
                    "<root>/dev/nvidia-uvm-tools".into()
                ),
            ]
        );
        assert!(r.devices.iter().all(|d| d.permissions == "rw"));
        assert_eq!(r.envs[VISIBLE_DEVICES], UUID1);
        assert_eq!(r.envs["LD_LIBRARY_PATH"], "/usr/local/nvidia/lib64");
        let smi = r
            .mounts
            .iter()
            .find(|m| m.container_path == "/usr/bin/nvidia-smi")
            .unwrap();
        assert_eq!(smi.host_path, format!("{root}/usr/bin/nvidia-smi"));
        assert!(r.mounts.iter().all(|m| m.read_only));
        assert_eq!(r.mounts.len(), 7);
        assert!(plugin.allocate(&["GPU-nope".into()]).await.is_err());
    }

    #[tokio::test]
    async fn a_gpu_whose_node_disappears_is_unhealthy() {
        let dir = host();
        let plugin = plugin(dir.path());
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
        std::fs::remove_file(dir.path().join("dev/nvidia1")).unwrap();
        let list = devices
            .wait_for(|l| l.iter().any(|d| d.health == UNHEALTHY))
            .await
            .unwrap()
            .clone();
        assert_eq!(
            (list[0].health.as_str(), list[1].health.as_str()),
            (HEALTHY, UNHEALTHY)
        );
        touch(dir.path(), "dev/nvidia1");
        devices
            .wait_for(|l| l.iter().all(|d| d.health == HEALTHY))
            .await
            .unwrap();
        watching.abort();
    }
}
