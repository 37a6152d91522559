//! Pod volumes, set up as upstream's kubelet volume plugins set them up, under
//! `<pods dir>/<pod uid>/`:
//!
//! ```text
//! volumes/kubernetes.io~empty-dir/<name>      emptyDir (0777; a tmpfs for medium: Memory)
//! volumes/kubernetes.io~configmap/<name>      configMap   (atomic writer, on disk)
//! volumes/kubernetes.io~secret/<name>         secret      (atomic writer, own tmpfs)
//! volumes/kubernetes.io~downward-api/<name>   downwardAPI (atomic writer, own tmpfs)
//! volumes/kubernetes.io~projected/<name>      projected   (atomic writer, own tmpfs)
//! volume-subpaths/<volume>/<container>/<i>    bind mounts of checked subPaths
//! containers/<container>/<id>                 termination-message files
//!
//! volumes/kubernetes.io~local-volume/<pv>    a bound claim's local volume, bind-mounted
//! ```
//!
//! hostPath volumes are the host's own paths, type-checked (or created) before use; so are the
//! hostPath volumes of claims ([`claim`]).
//! [`VolumeManager::setup`] runs on every pod sync and is idempotent; [`VolumeManager::mounts`]
//! turns a container's `volumeMounts` into CRI mounts; [`VolumeManager::refresh`] rewrites
//! changed ConfigMap/Secret/downward API content atomically; [`VolumeManager::teardown`]
//! unmounts everything below the pod's directory and removes it.

mod atomic_writer;
mod claim;
mod configmap;
mod downward_api;
mod empty_dir;
pub mod etc_hosts;
mod host_path;
mod projected;
mod secret;
mod subpath;
mod termination;
mod token;
mod util;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, DownwardAPIVolumeSource, Pod, ProjectedVolumeSource,
    SecretVolumeSource, Volume, VolumeMount,
};
use nix::mount::{MntFlags, MsFlags, mount, umount2};

pub use claim::{claim_of, uses_claim, waiting_pods};
pub use termination::{
    DEFAULT_TERMINATION_MESSAGE_PATH, MAX_TERMINATION_MESSAGE_LENGTH, read_termination_message,
};

use atomic_writer::Payload;

/// Why a volume could not be set up, mounted into a container or torn down.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VolumeError {
    /// A volume of the pod could not be set up: upstream reports it as a `FailedMount` event
    /// and the pod stays in ContainerCreating until a later sync succeeds.
    #[error("MountVolume.SetUp failed for volume \"{volume}\" : {reason}")]
    SetUp { volume: String, reason: String },
    /// A container's volumeMounts could not be satisfied (missing volume, bad subPath...):
    /// upstream's `CreateContainerConfigError`.
    #[error("{reason}")]
    Mount {
        container: String,
        volume: String,
        reason: String,
    },
    /// A claim of the pod is missing, not bound, or of a kind its containers cannot use
    /// (upstream's populator errors, reported by WaitForAttachAndMount): the pod waits.
    #[error(
        "Unable to attach or mount volumes: unmounted volumes=[{}], unattached volumes=[], failed to process volumes=[{}]: {}",
        .unmounted.join(" "), .failed.join(" "), .errors.join("; ")
    )]
    Unprocessed {
        unmounted: Vec<String>,
        failed: Vec<String>,
        errors: Vec<String>,
    },
    /// A claim's volume cannot be mounted by its plugin at all (a local path that is not a
    /// directory...).
    #[error("MountVolume.NewMounter initialization failed for volume \"{volume}\" : {reason}")]
    NewMounter { volume: String, reason: String },
    #[error("UnmountVolume.TearDown failed for pod \"{pod_uid}\" : {reason}")]
    TearDown { pod_uid: String, reason: String },
    /// The pod (or pods directory) cannot hold volumes: no UID, an unsafe name...
    #[error("{0}")]
    Invalid(String),
}

impl VolumeError {
    /// The event or waiting reason upstream uses for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            VolumeError::SetUp { .. }
            | VolumeError::Unprocessed { .. }
            | VolumeError::NewMounter { .. } => "FailedMount",
            VolumeError::Mount { .. } => "CreateContainerConfigError",
            VolumeError::TearDown { .. } => "FailedUnmount",
            VolumeError::Invalid(_) => "FailedMount",
        }
    }

    /// The volume concerned, when there is one.
    pub fn volume(&self) -> Option<&str> {
        match self {
            VolumeError::SetUp { volume, .. }
            | VolumeError::Mount { volume, .. }
            | VolumeError::NewMounter { volume, .. } => Some(volume),
            _ => None,
        }
    }

    /// Whether the pod waits on claims, which the kubelet watches: it is tried again when
    /// one changes, and otherwise only after upstream's pod worker back-off.
    pub fn waits_on_claims(&self) -> bool {
        matches!(self, VolumeError::Unprocessed { .. })
    }
}

/// The volume plugins this kubelet has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plugin {
    EmptyDir,
    HostPath,
    ConfigMap,
    Secret,
    DownwardApi,
    Projected,
    /// A claim's `local` volume.
    Local,
}

impl Plugin {
    /// The directory under `<pod>/volumes/` (upstream's escaped plugin name).
    pub fn dir_name(self) -> &'static str {
        match self {
            Plugin::EmptyDir => empty_dir::PLUGIN,
            Plugin::HostPath => "kubernetes.io~host-path",
            Plugin::ConfigMap => configmap::PLUGIN,
            Plugin::Secret => secret::PLUGIN,
            Plugin::DownwardApi => downward_api::PLUGIN,
            Plugin::Projected => projected::PLUGIN,
            Plugin::Local => claim::LOCAL_PLUGIN,
        }
    }

    /// Volumes the runtime always mounts read-only (upstream's `GetAttributes().ReadOnly`).
    pub fn always_read_only(self) -> bool {
        matches!(
            self,
            Plugin::ConfigMap | Plugin::Secret | Plugin::DownwardApi | Plugin::Projected
        )
    }

    /// Volumes on a tmpfs of their own.
    fn memory_backed(self) -> bool {
        matches!(
            self,
            Plugin::Secret | Plugin::DownwardApi | Plugin::Projected
        )
    }
}

/// One set-up volume of a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountedVolume {
    pub name: String,
    pub plugin: Plugin,
    /// What the runtime bind-mounts: the volume directory, or the hostPath itself.
    pub path: PathBuf,
    /// Mounted read-only whatever the volumeMount says.
    pub read_only: bool,
}

/// The set-up volumes of a pod, by volume name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodVolumes {
    pub volumes: BTreeMap<String, MountedVolume>,
}

impl PodVolumes {
    pub fn get(&self, name: &str) -> Option<&MountedVolume> {
        self.volumes.get(name)
    }
}

/// What the node offers pods; the downward API reports it for unset limits and memory-backed
/// volumes are sized by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeAllocatable {
    pub cpu_millis: i128,
    /// Bytes.
    pub memory: i128,
    /// Bytes.
    pub ephemeral_storage: i128,
}

impl NodeAllocatable {
    /// The machine's capacity: CPUs available to this process, MemTotal, and the size of the
    /// filesystem holding `dir` (or its nearest existing ancestor).
    pub fn from_machine(dir: &Path) -> NodeAllocatable {
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1) as i128;
        let memory = fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i128>().ok())
            })
            .map(|kb| kb * 1024)
            .unwrap_or(0);
        let storage = dir
            .ancestors()
            .find_map(|d| nix::sys::statvfs::statvfs(d).ok())
            .map(|s| s.blocks() as i128 * s.fragment_size() as i128)
            .unwrap_or(0);
        NodeAllocatable {
            cpu_millis: cpus * 1000,
            memory,
            ephemeral_storage: storage,
        }
    }
}

/// The volume sources written by the atomic writer.
#[derive(Clone, Copy)]
enum Projection<'a> {
    ConfigMap(&'a ConfigMapVolumeSource),
    Secret(&'a SecretVolumeSource),
    DownwardApi(&'a DownwardAPIVolumeSource),
    Projected(&'a ProjectedVolumeSource),
}

impl<'a> Projection<'a> {
    fn of(v: &'a Volume) -> Option<Projection<'a>> {
        if let Some(s) = &v.config_map {
            Some(Projection::ConfigMap(s))
        } else if let Some(s) = &v.secret {
            Some(Projection::Secret(s))
        } else if let Some(s) = &v.downward_api {
            Some(Projection::DownwardApi(s))
        } else {
            v.projected.as_ref().map(Projection::Projected)
        }
    }

    fn plugin(self) -> Plugin {
        match self {
            Projection::ConfigMap(_) => Plugin::ConfigMap,
            Projection::Secret(_) => Plugin::Secret,
            Projection::DownwardApi(_) => Plugin::DownwardApi,
            Projection::Projected(_) => Plugin::Projected,
        }
    }
}

/// The name of a volume source this kubelet has no plugin for.
fn unsupported_source(v: &Volume) -> &'static str {
    let sources: [(&str, bool); 12] = [
        ("persistentVolumeClaim", v.persistent_volume_claim.is_some()),
        ("ephemeral", v.ephemeral.is_some()),
        ("csi", v.csi.is_some()),
        ("nfs", v.nfs.is_some()),
        ("iscsi", v.iscsi.is_some()),
        ("image", v.image.is_some()),
        ("gitRepo", v.git_repo.is_some()),
        ("fc", v.fc.is_some()),
        ("rbd", v.rbd.is_some()),
        ("cephfs", v.cephfs.is_some()),
        ("glusterfs", v.glusterfs.is_some()),
        ("flexVolume", v.flex_volume.is_some()),
    ];
    sources
        .iter()
        .find(|(_, set)| *set)
        .map(|(name, _)| *name)
        .unwrap_or("this")
}

/// A kube-rs error as the kubelet words it.
pub(crate) fn api_error(kind: &str, name: &str, e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        e => format!("failed to get {kind} {name:?}: {e}"),
    }
}

/// A name used as one path element: not empty, no `/`, not `.` or `..`.
fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." || name.contains('\0') {
        return Err(format!("invalid {what} name {name:?}"));
    }
    Ok(())
}

fn pod_uid(pod: &Pod) -> Result<&str, VolumeError> {
    let uid = pod
        .metadata
        .uid
        .as_deref()
        .ok_or_else(|| VolumeError::Invalid("pod has no metadata.uid".into()))?;
    check_name("pod uid", uid).map_err(VolumeError::Invalid)?;
    Ok(uid)
}

fn fs_group(pod: &Pod) -> Option<i64> {
    pod.spec.as_ref()?.security_context.as_ref()?.fs_group
}

fn fs_group_change_policy(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .security_context
        .as_ref()?
        .fs_group_change_policy
        .clone()
}

/// Why one volume could not be set up.
enum Failure {
    /// Its claim is not usable yet (upstream's populator error).
    Process(String),
    Error(VolumeError),
}

impl From<VolumeError> for Failure {
    fn from(e: VolumeError) -> Self {
        Failure::Error(e)
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("volume task failed: {e}"))?
}

/// Upstream's translateMountPropagation.
fn propagation(mode: Option<&str>) -> Result<cri::MountPropagation, String> {
    match mode {
        None | Some("None") => Ok(cri::MountPropagation::PropagationPrivate),
        Some("HostToContainer") => Ok(cri::MountPropagation::PropagationHostToContainer),
        Some("Bidirectional") => Ok(cri::MountPropagation::PropagationBidirectional),
        Some(m) => Err(format!("invalid MountPropagation mode: {m:?}")),
    }
}

/// Upstream's resolveRecursiveReadOnly.
fn recursive_read_only(m: &VolumeMount, runtime_supports: bool) -> Result<bool, String> {
    let mode = match m.recursive_read_only.as_deref() {
        None | Some("Disabled") => return Ok(false),
        Some(mode) => mode,
    };
    if !m.read_only.unwrap_or(false) {
        return Err(format!(
            "volume {:?} requested recursive read-only mode, but it is not read-only",
            m.name
        ));
    }
    if let Some(p) = m.mount_propagation.as_deref().filter(|p| *p != "None") {
        return Err(format!(
            "volume {:?} requested recursive read-only mode, but it is not compatible with propagation {p:?}",
            m.name
        ));
    }
    match mode {
        "IfPossible" => Ok(runtime_supports),
        "Enabled" if runtime_supports => Ok(true),
        "Enabled" => Err(format!(
            "volume {:?} requested recursive read-only mode, but it is not supported by the runtime",
            m.name
        )),
        other => Err(format!("unknown recursive read-only mode {other:?}")),
    }
}

/// Upstream's MakeAbsolutePath on Linux.
fn absolute(path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    }
}

/// Unmounts every mount at or below `dir`, then removes it; refuses to remove anything while
/// a mount is left (a bind mount there could lead into the host's files).
fn teardown_dir(dir: &Path) -> Result<(), String> {
    let canonical = match dir.canonicalize() {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(util::path_error("stat", dir, &e)),
    };
    for _ in 0..8 {
        let mounts =
            util::mounts_under(&canonical).map_err(|e| format!("reading the mount table: {e}"))?;
        if mounts.is_empty() {
            break;
        }
        for m in mounts {
            match umount2(&m, MntFlags::empty()) {
                Ok(()) => tracing::debug!(path = %m.display(), "unmounted"),
                Err(nix::errno::Errno::EBUSY) => {
                    tracing::warn!(path = %m.display(), "mount busy, detaching it");
                    umount2(&m, MntFlags::MNT_DETACH)
                        .map_err(|e| format!("unmount {}: {e}", m.display()))?;
                }
                // Gone with a parent mount already.
                Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => {}
                Err(e) => return Err(format!("unmount {}: {e}", m.display())),
            }
        }
    }
    let left =
        util::mounts_under(&canonical).map_err(|e| format!("reading the mount table: {e}"))?;
    if !left.is_empty() {
        return Err(format!(
            "mounts remain under {}: {}",
            canonical.display(),
            left.iter()
                .map(|m| m.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    fs::remove_dir_all(&canonical).map_err(|e| util::path_error("remove", &canonical, &e))
}

/// Sets up and tears down the volumes of this node's pods.
#[derive(Clone)]
pub struct VolumeManager {
    pods_dir: PathBuf,
    client: kube::Client,
    allocatable: Arc<OnceLock<NodeAllocatable>>,
    runtime_supports_rro: bool,
    /// Whether volumes may be mounts (tmpfs, subPath binds); else plain directories.
    host_mounts: bool,
    /// One lock per pod: setup, refresh and teardown of a pod never overlap.
    locks: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
    /// Service-account tokens of projected volumes.
    tokens: token::TokenManager,
}

impl std::fmt::Debug for VolumeManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeManager")
            .field("pods_dir", &self.pods_dir)
            .finish_non_exhaustive()
    }
}

impl VolumeManager {
    pub fn new(pods_dir: PathBuf, client: kube::Client) -> Self {
        VolumeManager {
            pods_dir,
            client,
            allocatable: Arc::new(OnceLock::new()),
            runtime_supports_rro: false,
            host_mounts: true,
            locks: Arc::default(),
            tokens: Default::default(),
        }
    }

    /// What the node offers pods, when the kubelet reserves some of the machine; the machine's
    /// capacity otherwise.
    pub fn with_node_allocatable(self, allocatable: NodeAllocatable) -> Self {
        let _ = self.allocatable.set(allocatable);
        self
    }

    /// Whether the runtime supports recursive read-only mounts (its `RuntimeHandlerFeatures`);
    /// containerd 1.6 does not, so `recursiveReadOnly: Enabled` fails and `IfPossible` is off.
    pub fn with_recursive_read_only(mut self, supported: bool) -> Self {
        self.runtime_supports_rro = supported;
        self
    }

    /// Volumes without mounts, for a kubelet that must leave the host alone (a hollow node):
    /// memory-backed volumes are plain directories and subPaths are used in place (after the
    /// same checks) instead of being bind-mounted.
    pub fn without_host_mounts(mut self) -> Self {
        self.host_mounts = false;
        self
    }

    /// Whether a volume of `plugin` is a tmpfs here.
    fn memory_backed(&self, plugin: Plugin) -> bool {
        self.host_mounts && plugin.memory_backed()
    }

    pub fn pods_dir(&self) -> &Path {
        &self.pods_dir
    }

    /// `<pods dir>/<uid>`.
    pub fn pod_dir(&self, pod_uid: &str) -> PathBuf {
        self.pods_dir.join(pod_uid)
    }

    /// Where a volume of a plugin with its own directory lives.
    pub fn volume_dir(&self, pod_uid: &str, plugin: Plugin, volume: &str) -> PathBuf {
        self.pod_dir(pod_uid)
            .join("volumes")
            .join(plugin.dir_name())
            .join(volume)
    }

    fn allocatable(&self) -> NodeAllocatable {
        *self
            .allocatable
            .get_or_init(|| NodeAllocatable::from_machine(&self.pods_dir))
    }

    fn lock_for(&self, pod_uid: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .expect("volume locks")
            .entry(pod_uid.to_string())
            .or_default()
            .clone()
    }

    /// Makes the pods directory a shared mount (bind-mounting it onto itself first when it is
    /// not a mount point), as upstream's kubelet makes its root directory rshared: mounts made
    /// below it then reach containers that use HostToContainer or Bidirectional propagation,
    /// which containerd refuses on a private mount. Call once at kubelet start.
    pub fn make_shared(&self) -> Result<(), VolumeError> {
        let err = |reason: String| VolumeError::Invalid(reason);
        util::make_dir_all(&self.pods_dir, 0o750)
            .map_err(|e| err(util::path_error("mkdir", &self.pods_dir, &e)))?;
        let dir = self
            .pods_dir
            .canonicalize()
            .map_err(|e| err(util::path_error("stat", &self.pods_dir, &e)))?;
        if util::is_shared(&dir).map_err(|e| err(format!("reading the mount table: {e}")))? {
            return Ok(());
        }
        if !util::is_mount_point(&dir).map_err(|e| err(format!("reading the mount table: {e}")))? {
            mount(
                Some(&dir),
                &dir,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )
            .map_err(|e| err(format!("bind-mounting {} onto itself: {e}", dir.display())))?;
        }
        mount(
            None::<&str>,
            &dir,
            None::<&str>,
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|e| err(format!("making {} rshared: {e}", dir.display())))?;
        tracing::info!(dir = %dir.display(), "pods directory is a shared mount");
        Ok(())
    }

    /// Sets up every volume of the pod under `<pods_dir>/<pod uid>/volumes/<plugin>/<name>`.
    /// Idempotent: volumes already set up are left as they are (see [`Self::refresh`]). Every
    /// volume is tried; the first failure is returned, naming its volume and reason.
    pub async fn setup(&self, pod: &Pod) -> Result<PodVolumes, VolumeError> {
        let uid = pod_uid(pod)?;
        let lock = self.lock_for(uid);
        let _guard = lock.lock().await;
        let volumes_dir = self.pod_dir(uid).join("volumes");
        {
            let dir = volumes_dir.clone();
            blocking(move || {
                util::make_dir_all(&dir, 0o750).map_err(|e| util::path_error("mkdir", &dir, &e))
            })
            .await
            .map_err(VolumeError::Invalid)?;
        }
        let mut out = PodVolumes::default();
        let mut first_error = None;
        let mut unmounted = Vec::new();
        let mut unprocessed = Vec::new();
        let mut errors = Vec::new();
        for v in pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
        {
            let result = if claim::claim_of(pod, v).is_some() {
                self.setup_claim(pod, uid, v).await
            } else {
                self.setup_volume(pod, uid, v).await.map_err(|reason| {
                    Failure::Error(VolumeError::SetUp {
                        volume: v.name.clone(),
                        reason,
                    })
                })
            };
            match result {
                Ok(mounted) => {
                    out.volumes.insert(v.name.clone(), mounted);
                }
                Err(Failure::Process(e)) => {
                    tracing::info!(pod = %pod_name(pod), volume = %v.name, error = %e, "waiting for a claim");
                    unmounted.push(v.name.clone());
                    unprocessed.push(v.name.clone());
                    errors.push(e);
                }
                Err(Failure::Error(e)) => {
                    tracing::warn!(
                        pod = %pod_name(pod), error = %e, "volume setup failed"
                    );
                    unmounted.push(v.name.clone());
                    first_error.get_or_insert(e);
                }
            }
        }
        if !errors.is_empty() {
            unmounted.sort();
            unprocessed.sort();
            return Err(VolumeError::Unprocessed {
                unmounted,
                failed: unprocessed,
                errors,
            });
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// A persistentVolumeClaim or generic ephemeral volume: the claim's bound volume, checked
    /// and (for `local`) bind-mounted into the pod's directory with its fsGroup applied.
    async fn setup_claim(
        &self,
        pod: &Pod,
        uid: &str,
        v: &Volume,
    ) -> Result<MountedVolume, Failure> {
        check_name("volume", &v.name).map_err(|reason| VolumeError::SetUp {
            volume: v.name.clone(),
            reason,
        })?;
        let planned = claim::resolve(&self.client, pod, v)
            .await
            .map_err(Failure::Process)?;
        let pv = planned.pv_name.clone();
        let setup_error = |reason: String| VolumeError::SetUp {
            volume: pv.clone(),
            reason,
        };
        let mounted = |plugin: Plugin, path: PathBuf| MountedVolume {
            name: v.name.clone(),
            plugin,
            path,
            read_only: planned.read_only,
        };
        match planned.source.clone() {
            claim::Source::HostPath { path, type_ } => {
                let p = path.clone();
                blocking(move || host_path::check_type(&p, &type_))
                    .await
                    .map_err(setup_error)?;
                Ok(mounted(Plugin::HostPath, path))
            }
            claim::Source::Local { path } => {
                let p = path.clone();
                blocking(move || claim::check_local(&p))
                    .await
                    .map_err(|reason| VolumeError::NewMounter {
                        volume: pv.clone(),
                        reason,
                    })?;
                if !self.host_mounts {
                    return Ok(mounted(Plugin::Local, path));
                }
                check_name("volume", &pv).map_err(setup_error)?;
                let dir = self.volume_dir(uid, Plugin::Local, &pv);
                let d = dir.clone();
                let group = fs_group(pod).filter(|_| !planned.read_only);
                let policy = fs_group_change_policy(pod);
                blocking(move || local_setup(&path, &d, group, policy.as_deref()))
                    .await
                    .map_err(setup_error)?;
                Ok(mounted(Plugin::Local, dir))
            }
            claim::Source::Unsupported(kind) => {
                Err(setup_error(format!("{kind} volumes are not supported by this kubelet")).into())
            }
        }
    }

    async fn setup_volume(
        &self,
        pod: &Pod,
        uid: &str,
        v: &Volume,
    ) -> Result<MountedVolume, String> {
        check_name("volume", &v.name)?;
        let mounted = |plugin: Plugin, path: PathBuf| MountedVolume {
            name: v.name.clone(),
            plugin,
            path,
            read_only: plugin.always_read_only(),
        };
        if let Some(src) = &v.empty_dir {
            let dir = self.volume_dir(uid, Plugin::EmptyDir, &v.name);
            let (d, src, pod) = (dir.clone(), src.clone(), pod.clone());
            let memory = self.allocatable().memory;
            let group = fs_group(&pod);
            let mounts = self.host_mounts;
            blocking(move || empty_dir::setup(&d, &src, &pod, memory, group, mounts)).await?;
            return Ok(mounted(Plugin::EmptyDir, dir));
        }
        if let Some(src) = &v.host_path {
            let path = PathBuf::from(&src.path);
            let (p, kind) = (path.clone(), src.type_.clone().unwrap_or_default());
            blocking(move || host_path::check_type(&p, &kind)).await?;
            return Ok(mounted(Plugin::HostPath, path));
        }
        let Some(projection) = Projection::of(v) else {
            return Err(format!(
                "{} volumes are not supported by this kubelet",
                unsupported_source(v)
            ));
        };
        let plugin = projection.plugin();
        let dir = self.volume_dir(uid, plugin, &v.name);
        let d = dir.clone();
        let memory = self.memory_backed(plugin);
        let ready = blocking(move || Ok(projection_ready(&d, memory))).await?;
        if !ready {
            // Read the sources first: a missing Secret leaves neither directory nor tmpfs.
            let payload = self.payload(pod, projection).await?;
            let size = empty_dir::memory_size(self.allocatable().memory, pod, None);
            let context = writer_context(pod, &v.name);
            let group = fs_group(pod);
            let d = dir.clone();
            blocking(move || {
                if memory {
                    empty_dir::setup_tmpfs(&d, size)?;
                } else {
                    empty_dir::setup_dir(&d)?;
                }
                write_projection(&d, &payload, &context, group)
            })
            .await?;
        }
        Ok(mounted(plugin, dir))
    }

    /// The files a projection volume should hold now.
    async fn payload(&self, pod: &Pod, projection: Projection<'_>) -> Result<Payload, String> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        match projection {
            Projection::ConfigMap(s) => {
                let optional = s.optional.unwrap_or(false);
                let cm = configmap::get(&self.client, namespace, &s.name, optional).await?;
                configmap::make_payload(
                    s.items.as_deref(),
                    cm.as_ref(),
                    s.default_mode.unwrap_or(0o644),
                    optional,
                )
            }
            Projection::Secret(s) => {
                let optional = s.optional.unwrap_or(false);
                let name = s.secret_name.as_deref().unwrap_or_default();
                let secret = secret::get(&self.client, namespace, name, optional).await?;
                secret::make_payload(
                    s.items.as_deref(),
                    secret.as_ref(),
                    s.default_mode.unwrap_or(0o644),
                    optional,
                )
            }
            Projection::DownwardApi(s) => downward_api::collect(
                s.items.as_deref().unwrap_or_default(),
                pod,
                &self.allocatable(),
                s.default_mode.unwrap_or(0o644),
            ),
            Projection::Projected(s) => {
                projected::collect(&self.client, pod, s, &self.allocatable(), &self.tokens).await
            }
        }
    }

    /// The CRI mounts for one container: its volumeMounts (subPath and subPathExpr resolved
    /// inside the volume and bind-mounted, propagation and read-only translated), then the
    /// termination-message file. `env` is the container's environment, for `subPathExpr`.
    pub fn mounts(
        &self,
        pod: &Pod,
        volumes: &PodVolumes,
        container: &Container,
        env: &BTreeMap<String, String>,
    ) -> Result<Vec<cri::Mount>, VolumeError> {
        let uid = pod_uid(pod)?;
        let pod_dir = self.pod_dir(uid);
        let err = |volume: &str, reason: String| VolumeError::Mount {
            container: container.name.clone(),
            volume: volume.to_string(),
            reason,
        };
        check_name("container", &container.name).map_err(|e| err("", e))?;
        let mut out = Vec::new();
        for (index, m) in container.volume_mounts.iter().flatten().enumerate() {
            let Some(vol) = volumes.get(&m.name) else {
                return Err(err(
                    &m.name,
                    format!(
                        "cannot find volume {:?} to mount into container {:?}",
                        m.name, container.name
                    ),
                ));
            };
            let sub = match m.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
                Some(expr) => subpath::expand(expr, env).map_err(|e| err(&m.name, e))?,
                None => m.sub_path.clone().unwrap_or_default(),
            };
            let mut host_path = vol.path.clone();
            if !sub.is_empty() {
                host_path = self
                    .prepare_subpath(&pod_dir, vol, container, index, &sub)
                    .map_err(|reason| err(&m.name, reason))?;
            }
            let propagation =
                propagation(m.mount_propagation.as_deref()).map_err(|e| err(&m.name, e))?;
            let rro = recursive_read_only(m, self.runtime_supports_rro).map_err(|e| {
                err(
                    &m.name,
                    format!("failed to resolve recursive read-only mode: {e}"),
                )
            })?;
            out.push(cri::Mount {
                container_path: absolute(&m.mount_path),
                host_path: host_path.to_string_lossy().into_owned(),
                readonly: m.read_only.unwrap_or(false) || vol.read_only,
                selinux_relabel: false,
                propagation: propagation as i32,
                recursive_read_only: rro,
                ..Default::default()
            });
        }
        let message_path = container
            .termination_message_path
            .as_deref()
            .unwrap_or(DEFAULT_TERMINATION_MESSAGE_PATH);
        if !message_path.is_empty() {
            match termination::create_file(&pod_dir, &container.name) {
                Ok(file) => out.push(cri::Mount {
                    container_path: absolute(message_path),
                    host_path: file.to_string_lossy().into_owned(),
                    ..Default::default()
                }),
                // As upstream: the container still runs, without the file.
                Err(e) => tracing::error!(
                    pod = %pod_name(pod), container = %container.name, error = %e,
                    "creating the termination-log file"
                ),
            }
        }
        Ok(out)
    }

    /// The pod's managed `/etc/hosts` (see [`etc_hosts`]) for `container`: `None` when the
    /// container mounts something there itself or the pod has no address yet.
    pub fn etc_hosts_mount(
        &self,
        pod: &Pod,
        container: &Container,
        ips: &[&str],
        hostname: &str,
        domain: Option<&str>,
    ) -> Result<Option<cri::Mount>, VolumeError> {
        let own = container
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| absolute(&m.mount_path) == etc_hosts::ETC_HOSTS);
        if own || ips.iter().all(|ip| ip.is_empty()) {
            return Ok(None);
        }
        let spec = pod.spec.as_ref();
        let aliases = spec
            .and_then(|s| s.host_aliases.clone())
            .unwrap_or_default();
        let content = if spec.and_then(|s| s.host_network).unwrap_or(false) {
            let node = fs::read_to_string(etc_hosts::ETC_HOSTS).unwrap_or_default();
            etc_hosts::host_network(&node, &aliases)
        } else {
            etc_hosts::managed(ips, hostname, domain, &aliases)
        };
        let pod_dir = self.pod_dir(pod_uid(pod)?);
        let file = etc_hosts::write(&pod_dir, &content).map_err(|e| VolumeError::Mount {
            container: container.name.clone(),
            volume: String::new(),
            reason: format!("writing the pod's hosts file: {e}"),
        })?;
        Ok(Some(cri::Mount {
            container_path: etc_hosts::ETC_HOSTS.into(),
            host_path: file.to_string_lossy().into_owned(),
            ..Default::default()
        }))
    }

    /// Upstream's makeMounts subPath branch: checks, creates a missing subpath directory
    /// safely, then bind-mounts the checked file. Details go to the log, not to the user.
    fn prepare_subpath(
        &self,
        pod_dir: &Path,
        vol: &MountedVolume,
        container: &Container,
        index: usize,
        sub: &str,
    ) -> Result<PathBuf, String> {
        if sub.starts_with('/') {
            return Err(format!(
                "error SubPath `{sub}` must not be an absolute path"
            ));
        }
        subpath::validate_no_backsteps(sub)
            .map_err(|e| format!("unable to provision SubPath `{sub}`: {e}"))?;
        let name = &vol.name;
        let full = vol.path.join(sub);
        if fs::metadata(&full).is_err() {
            let perm = fs::metadata(&vol.path)
                .map(|m| m.mode() & 0o777)
                .map_err(|e| util::path_error("stat", &vol.path, &e))?;
            subpath::safe_make_dir(sub, &vol.path, perm).map_err(|e| {
                tracing::error!(container = %container.name, volume = %name, error = %e,
                    "failed to create subPath directory");
                format!(
                    "failed to create subPath directory for volumeMount {name:?} of container {:?}",
                    container.name
                )
            })?;
        }
        if !self.host_mounts {
            return Ok(full);
        }
        subpath::prepare(&subpath::Subpath {
            pod_dir,
            volume_name: name,
            volume_path: &vol.path,
            container_name: &container.name,
            index,
            sub_path: sub,
        })
        .map_err(|e| {
            tracing::error!(container = %container.name, volume = %name, error = %e,
                "failed to prepare subPath");
            format!(
                "failed to prepare subPath for volumeMount {name:?} of container {:?}",
                container.name
            )
        })
    }

    /// Re-reads the configMap, secret, downwardAPI and projected sources of the pod and
    /// rewrites the volumes whose content changed, atomically. Volumes not set up yet are left
    /// to [`Self::setup`]. On error the old content stays; the first error is returned.
    pub async fn refresh(&self, pod: &Pod) -> Result<(), VolumeError> {
        let uid = pod_uid(pod)?;
        let lock = self.lock_for(uid);
        let _guard = lock.lock().await;
        let mut first_error = None;
        for v in pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
        {
            let Some(projection) = Projection::of(v) else {
                continue;
            };
            if check_name("volume", &v.name).is_err() {
                continue;
            }
            let plugin = projection.plugin();
            let dir = self.volume_dir(uid, plugin, &v.name);
            let d = dir.clone();
            let memory = self.memory_backed(plugin);
            if !blocking(move || Ok(projection_ready(&d, memory)))
                .await
                .unwrap_or(false)
            {
                continue;
            }
            let result = match self.payload(pod, projection).await {
                Ok(payload) => {
                    let context = writer_context(pod, &v.name);
                    let group = fs_group(pod);
                    blocking(move || write_projection(&dir, &payload, &context, group)).await
                }
                Err(e) => Err(e),
            };
            match result {
                Ok(true) => {
                    tracing::info!(pod = %pod_name(pod), volume = %v.name, "volume content updated")
                }
                Ok(false) => {}
                Err(reason) => {
                    let e = VolumeError::SetUp {
                        volume: v.name.clone(),
                        reason,
                    };
                    tracing::warn!(pod = %pod_name(pod), error = %e, "volume refresh failed");
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Unmounts the pod's tmpfs and subPath mounts and removes its directory. Call after its
    /// containers are gone; a missing directory is not an error.
    pub async fn teardown(&self, pod_uid: &str) -> Result<(), VolumeError> {
        check_name("pod uid", pod_uid).map_err(VolumeError::Invalid)?;
        let lock = self.lock_for(pod_uid);
        let guard = lock.lock().await;
        let dir = self.pod_dir(pod_uid);
        let result = blocking(move || teardown_dir(&dir)).await;
        drop(guard);
        self.tokens.forget_pod(pod_uid);
        if result.is_ok() {
            self.locks.lock().expect("volume locks").remove(pod_uid);
            tracing::debug!(pod_uid, "pod volumes torn down");
        }
        result.map_err(|reason| VolumeError::TearDown {
            pod_uid: pod_uid.to_string(),
            reason,
        })
    }

    /// Pod UIDs that have a directory here, to clean up pods deleted while the kubelet was down.
    pub fn known_pods(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(&self.pods_dir) else {
            return Vec::new();
        };
        let mut pods: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        pods.sort();
        pods
    }
}

/// Upstream's local plugin SetUp: the node's directory bind-mounted at the pod's volume
/// directory, once; the pod's fsGroup is applied then (the first mount), honouring
/// `fsGroupChangePolicy: OnRootMismatch`.
fn local_setup(
    source: &Path,
    dir: &Path,
    fs_group: Option<i64>,
    policy: Option<&str>,
) -> Result<(), String> {
    util::make_dir_all(dir, 0o750).map_err(|e| util::path_error("mkdir", dir, &e))?;
    let canonical = dir
        .canonicalize()
        .map_err(|e| util::path_error("stat", dir, &e))?;
    if util::is_mount_point(&canonical).map_err(|e| format!("reading the mount table: {e}"))? {
        return Ok(());
    }
    mount(
        Some(source),
        &canonical,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| {
        format!(
            "mount failed: bind-mounting {} at {}: {e}",
            source.display(),
            canonical.display()
        )
    })?;
    if let Some(group) = fs_group {
        util::set_volume_ownership_with_policy(&canonical, group, false, policy)
            .map_err(|e| util::path_error("chown", &canonical, &e))?;
    }
    Ok(())
}

fn pod_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

fn writer_context(pod: &Pod, volume: &str) -> String {
    format!("pod {} volume {volume}", pod_name(pod))
}

/// Whether a projection volume was published (and, when memory-backed, still is on its tmpfs).
fn projection_ready(dir: &Path, memory: bool) -> bool {
    if !atomic_writer::is_ready(dir) {
        return false;
    }
    !memory
        || dir
            .canonicalize()
            .ok()
            .and_then(|d| util::is_mount_point(&d).ok())
            .unwrap_or(false)
}

fn write_projection(
    dir: &Path,
    payload: &Payload,
    context: &str,
    fs_group: Option<i64>,
) -> Result<bool, String> {
    let set_perms = move |d: &Path| -> io::Result<()> {
        fs_group.map_or(Ok(()), |g| util::set_volume_ownership(d, g, true))
    };
    atomic_writer::write(
        dir,
        payload,
        context,
        fs_group
            .is_some()
            .then_some(&set_perms as &dyn Fn(&Path) -> io::Result<()>),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn propagation_modes() {
        assert_eq!(
            propagation(None),
            Ok(cri::MountPropagation::PropagationPrivate)
        );
        assert_eq!(
            propagation(Some("None")),
            Ok(cri::MountPropagation::PropagationPrivate)
        );
        assert_eq!(
            propagation(Some("HostToContainer")),
            Ok(cri::MountPropagation::PropagationHostToContainer)
        );
        assert_eq!(
            propagation(Some("Bidirectional")),
            Ok(cri::MountPropagation::PropagationBidirectional)
        );
        assert_eq!(
            propagation(Some("Sideways")),
            Err("invalid MountPropagation mode: \"Sideways\"".into())
        );
    }

    #[test]
    fn recursive_read_only_modes() {
        let m = |rro: Option<&str>, ro: bool, prop: Option<&str>| VolumeMount {
            name: "v".into(),
            mount_path: "/x".into(),
            read_only: Some(ro),
            recursive_read_only: rro.map(Into::into),
            mount_propagation: prop.map(Into::into),
            ..Default::default()
        };
        assert_eq!(recursive_read_only(&m(None, true, None), false), Ok(false));
        assert_eq!(
            recursive_read_only(&m(Some("IfPossible"), true, None), false),
            Ok(false)
        );
        assert_eq!(
            recursive_read_only(&m(Some("IfPossible"), true, None), true),
            Ok(true)
        );
        assert!(recursive_read_only(&m(Some("Enabled"), true, None), false).is_err());
        assert!(recursive_read_only(&m(Some("Enabled"), false, None), true).is_err());
        assert!(
            recursive_read_only(&m(Some("Enabled"), true, Some("HostToContainer")), true).is_err()
        );
    }

    #[test]
    fn errors_read_as_upstream() {
        let e = VolumeError::SetUp {
            volume: "cfg".into(),
            reason: "configmap \"x\" not found".into(),
        };
        assert_eq!(
            e.to_string(),
            "MountVolume.SetUp failed for volume \"cfg\" : configmap \"x\" not found"
        );
        assert_eq!(e.reason(), "FailedMount");
        assert_eq!(e.volume(), Some("cfg"));
    }

    #[test]
    fn names_are_single_path_elements() {
        assert!(check_name("volume", "data").is_ok());
        for bad in ["", ".", "..", "a/b", "../x"] {
            assert!(check_name("volume", bad).is_err(), "{bad}");
        }
    }
}
