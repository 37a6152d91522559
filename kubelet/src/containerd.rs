//! A private containerd, run by us as a child process (as k3s runs its own): everything it
//! keeps (root, state, sockets, runc's state, CNI config) lives under one directory, so it
//! never collides with another containerd on the machine. Used by the kubelet and by tests.
//!
//! Stopping it takes down what it started: containerd runs in a process group of its own, and
//! its shims (which put themselves in groups of their own) are found by the socket they were
//! told to call back on; their container processes go with them. Mounts left under the
//! directory are then detached.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// The pause image the CRI plugin starts every sandbox with.
pub const SANDBOX_IMAGE: &str = crate::images::build::PAUSE_IMAGE;

/// Opens a gRPC channel over a unix socket (containerd's API and the CRI both live there).
pub async fn connect(socket: impl AsRef<Path>) -> Result<Channel, tonic::transport::Error> {
    let path = socket.as_ref().to_path_buf();
    // The URI is never dialled: the connector below always opens the socket.
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("containerd exited ({status}) before it was ready; its log ends with:\n{log}")]
    Exited { status: ExitStatus, log: String },
    #[error("containerd did not answer on {socket} within {timeout:?}; its log ends with:\n{log}")]
    NotReady {
        socket: String,
        timeout: Duration,
        log: String,
    },
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

/// The OCI runtime for the runc shim: crun when installed, else runc. crun, a small C
/// program, creates and starts a container for well under half of runc's CPU (runc starts a
/// Go runtime for every call and re-executes itself as `runc init`), and every pod starts two
/// containers, its sandbox and the container proper. `MINIK8S_OCI_RUNTIME` names another
/// binary (for comparing the two). [`Containerd::start`] falls back to runc where crun cannot
/// manage the cgroups.
pub fn oci_runtime() -> PathBuf {
    if let Some(path) = std::env::var_os("MINIK8S_OCI_RUNTIME").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    find_binary("crun").unwrap_or_else(runc)
}

fn runc() -> PathBuf {
    find_binary("runc").unwrap_or_else(|| PathBuf::from("/usr/sbin/runc"))
}

/// `name` in the usual system directories or on `PATH`.
fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"]
        .into_iter()
        .map(PathBuf::from)
        .chain(std::env::split_paths(&path))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// minik8s's CNI plugin: `minik8s-cni` beside this program, or beside the directory it is in
/// (cargo's test programs live in `target/<profile>/deps`).
pub fn cni_plugin() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [Some(dir), dir.parent()]
        .into_iter()
        .flatten()
        .map(|d| d.join("minik8s-cni"))
        .find(|p| p.is_file())
}

fn is_crun(binary: &Path) -> bool {
    binary.file_name().is_some_and(|n| n == "crun")
}

/// Whether crun can manage this machine's cgroups, making it so where it can: crun refuses a
/// hybrid layout (v1 controllers beside a v2 hierarchy) as soon as any controller is attached
/// to the v2 hierarchy, as hugetlb is when the host mounts no v1 hierarchy for it. Such a
/// controller is mounted as a v1 hierarchy of its own under `/sys/fs/cgroup` (where runc and
/// the kubelet's pod cgroups use it as they use the others), which the kernel allows while no
/// v2 cgroup has it enabled.
fn cgroups_ready_for_crun() -> bool {
    let mounts = cgroup_mounts();
    let Some(v2) = mounts.iter().find(|m| m.v2) else {
        return true;
    };
    if !mounts.iter().any(|m| !m.v2) {
        return true;
    }
    let controllers_file = v2.point.join("cgroup.controllers");
    let attached = || std::fs::read_to_string(&controllers_file).unwrap_or_default();
    for controller in attached().split_whitespace() {
        let target = Path::new("/sys/fs/cgroup").join(controller);
        if let Err(e) = std::fs::create_dir_all(&target) {
            tracing::info!(controller, error = %e, "cannot move a controller off cgroup v2");
            continue;
        }
        let flags = nix::mount::MsFlags::empty();
        match nix::mount::mount(
            Some("cgroup"),
            &target,
            Some("cgroup"),
            flags,
            Some(controller),
        ) {
            Ok(()) => tracing::info!(
                controller,
                at = %target.display(),
                "mounted a cgroup v1 hierarchy for crun"
            ),
            Err(e) => {
                tracing::info!(controller, error = %e, "cannot move a controller off cgroup v2")
            }
        }
    }
    attached().trim().is_empty()
}

/// How to run the private containerd.
#[derive(Clone, Debug)]
pub struct ContainerdConfig {
    /// Everything containerd keeps lives under this directory.
    pub dir: PathBuf,
    pub binary: PathBuf,
    pub sandbox_image: String,
    /// The OCI runtime the runc shim runs (its `BinaryName`): see [`oci_runtime`].
    pub runc: PathBuf,
    /// Where the stock CNI plugins are (portmap is still run from there for hostPorts).
    pub cni_bin_dir: PathBuf,
    /// minik8s's CNI plugin ([`cni_plugin`]); without it pods get the stock plugins.
    pub cni_plugin: Option<PathBuf>,
    pub snapshotter: String,
    /// containerd's log level (`debug`, `info`, `warn`, ...).
    pub log_level: String,
}

/// A TOML basic string (JSON's escaping is valid TOML).
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

impl ContainerdConfig {
    pub fn new(dir: impl Into<PathBuf>) -> ContainerdConfig {
        ContainerdConfig {
            dir: dir.into(),
            binary: PathBuf::from("/usr/bin/containerd"),
            sandbox_image: SANDBOX_IMAGE.to_string(),
            runc: oci_runtime(),
            cni_bin_dir: PathBuf::from("/usr/lib/cni"),
            cni_plugin: cni_plugin(),
            snapshotter: "overlayfs".to_string(),
            log_level: "info".to_string(),
        }
    }

    /// The gRPC socket: containerd's API and the CRI.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }
    pub fn ttrpc_socket(&self) -> PathBuf {
        self.dir.join("containerd.sock.ttrpc")
    }
    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }
    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }
    /// Where the CRI plugin looks for a CNI network configuration.
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("cni")
    }
    /// The CRI plugin's CNI plugin directory: the stock one, or with minik8s's plugin one of
    /// our own that [`Containerd::start`] fills with links (see [`Self::cni_links`]).
    pub fn cni_plugin_dir(&self) -> PathBuf {
        match self.cni_plugin {
            Some(_) => self.dir.join("cni-bin"),
            None => self.cni_bin_dir.clone(),
        }
    }
    /// The links of our CNI plugin directory: name and target. The plugin serves the bridge
    /// network and the loopback one containerd adds to every pod; portmap stays the stock one,
    /// and so do bridge and host-local: a conflist of an earlier version, still there until
    /// the kubelet writes its own, keeps working (for pods it set up, too).
    pub fn cni_links(&self) -> Vec<(String, PathBuf)> {
        let Some(plugin) = &self.cni_plugin else {
            return Vec::new();
        };
        let mut links = vec![
            (minik8s_cni::BRIDGE_TYPE.to_string(), plugin.clone()),
            (minik8s_cni::LOOPBACK_TYPE.to_string(), plugin.clone()),
        ];
        for stock in ["portmap", "bridge", "host-local"] {
            links.push((stock.to_string(), self.cni_bin_dir.join(stock)));
        }
        links
    }
    pub fn runc_root(&self) -> PathBuf {
        self.dir.join("runc")
    }
    pub fn opt_dir(&self) -> PathBuf {
        self.dir.join("opt")
    }
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.toml")
    }
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("containerd.log")
    }
    pub fn pid_path(&self) -> PathBuf {
        self.dir.join("containerd.pid")
    }

    /// containerd's configuration file (version 2, containerd 1.6).
    pub fn render(&self) -> String {
        let p = |p: PathBuf| toml_str(&p.to_string_lossy());
        let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
        format!(
            r#"# Written by minik8s: a private containerd, everything under one directory.
version = 2
root = {root}
state = {state}
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = {grpc}

[ttrpc]
  address = {ttrpc}

[debug]
  level = {level}

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = {opt}

  [{cri}]
    sandbox_image = {sandbox}
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    netns_mounts_under_state_dir = true

  [{cri}.containerd]
    snapshotter = {snapshotter}
    default_runtime_name = "runc"

  [{cri}.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    pod_annotations = [{shim_group}]

  [{cri}.containerd.runtimes.runc.options]
    BinaryName = {runc}
    Root = {runc_root}
    SystemdCgroup = false

  [{cri}.cni]
    bin_dir = {cni_bin}
    conf_dir = {cni_conf}
    max_conf_num = 1
"#,
            root = p(self.root()),
            state = p(self.state()),
            grpc = p(self.socket()),
            ttrpc = p(self.ttrpc_socket()),
            level = toml_str(&self.log_level),
            opt = p(self.opt_dir()),
            sandbox = toml_str(&self.sandbox_image),
            snapshotter = toml_str(&self.snapshotter),
            runc = p(self.runc.clone()),
            runc_root = p(self.runc_root()),
            cni_bin = p(self.cni_plugin_dir()),
            shim_group = toml_str(crate::pod::model::keys::SHIM_GROUP),
            cni_conf = p(self.cni_conf_dir()),
        )
    }
}

/// Fills our CNI plugin directory with its links, replacing what an earlier start left.
fn link_cni_plugins(config: &ContainerdConfig) -> Result<(), Error> {
    let links = config.cni_links();
    if links.is_empty() {
        return Ok(());
    }
    let dir = config.cni_plugin_dir();
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    for (name, target) in links {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).map_err(io(format!(
            "linking {} to {}",
            link.display(),
            target.display()
        )))?;
    }
    Ok(())
}

/// A running private containerd; stopped (with everything it started) on drop.
pub struct Containerd {
    config: ContainerdConfig,
    child: Option<Child>,
}

impl std::fmt::Debug for Containerd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Containerd")
            .field("dir", &self.config.dir)
            .field("pid", &self.child.as_ref().map(Child::id))
            .finish()
    }
}

impl Containerd {
    /// Writes the configuration, starts containerd and waits (at most `timeout`) until both
    /// its API and the CRI plugin answer on the socket.
    pub async fn start(
        mut config: ContainerdConfig,
        timeout: Duration,
    ) -> Result<Containerd, Error> {
        std::fs::create_dir_all(&config.dir)
            .map_err(io(format!("creating {}", config.dir.display())))?;
        // Mount points are reported canonical; so must our directory be to find them.
        config.dir = config
            .dir
            .canonicalize()
            .map_err(io(format!("resolving {}", config.dir.display())))?;
        for d in [config.cni_conf_dir(), config.runc_root(), config.opt_dir()] {
            std::fs::create_dir_all(&d).map_err(io(format!("creating {}", d.display())))?;
        }
        link_cni_plugins(&config)?;
        stop_stale(&config);
        if is_crun(&config.runc) && !cgroups_ready_for_crun() {
            tracing::warn!(
                "crun cannot manage this machine's cgroups (hybrid with controllers on v2): using runc"
            );
            config.runc = runc();
        }
        let path = config.config_path();
        std::fs::write(&path, config.render())
            .map_err(io(format!("writing {}", path.display())))?;
        for stale in [config.socket(), config.ttrpc_socket()] {
            let _ = std::fs::remove_file(stale);
        }
        let log = File::options()
            .create(true)
            .append(true)
            .open(config.log_path())
            .map_err(io(format!("opening {}", config.log_path().display())))?;
        let log2 = log
            .try_clone()
            .map_err(io(format!("opening {}", config.log_path().display())))?;
        let child = Command::new(&config.binary)
            .arg("--config")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            // A process group of its own: stopping it never signals whoever started it.
            .process_group(0)
            .spawn()
            .map_err(io(format!("starting {}", config.binary.display())))?;
        tracing::info!(pid = child.id(), dir = %config.dir.display(), "started containerd");
        let pid = child.id();
        let mut me = Containerd {
            config,
            child: Some(child),
        };
        let pid_path = me.config.pid_path();
        std::fs::write(&pid_path, format!("{pid}\n"))
            .map_err(io(format!("writing {}", pid_path.display())))?;
        me.wait_ready(timeout).await?;
        Ok(me)
    }

    pub fn config(&self) -> &ContainerdConfig {
        &self.config
    }

    pub fn socket(&self) -> PathBuf {
        self.config.socket()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A channel to containerd's socket.
    pub async fn channel(&self) -> Result<Channel, tonic::transport::Error> {
        connect(self.socket()).await
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.config.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    async fn ready(&self) -> bool {
        let Ok(channel) = self.channel().await else {
            return false;
        };
        let version =
            containerd_client::services::v1::version_client::VersionClient::new(channel.clone())
                .version(())
                .await;
        if version.is_err() {
            return false;
        }
        // The CRI plugin answers "server is not initialized yet" until it is.
        k8s_cri::v1::runtime_service_client::RuntimeServiceClient::new(channel)
            .version(k8s_cri::v1::VersionRequest {
                version: "v1".to_string(),
            })
            .await
            .is_ok()
    }

    async fn wait_ready(&mut self, timeout: Duration) -> Result<(), Error> {
        let start = Instant::now();
        let deadline = start + timeout;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(Error::Exited {
                    status,
                    log: self.log_tail(),
                });
            }
            if self.socket().exists() && self.ready().await {
                tracing::info!(elapsed = ?start.elapsed(), "containerd is ready");
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::NotReady {
                    socket: self.socket().display().to_string(),
                    timeout,
                    log: self.log_tail(),
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops every pod sandbox through the CRI first (so containers end cleanly and their
    /// cgroups go), then stops containerd as [`Containerd::stop`] does.
    pub async fn shutdown(mut self) {
        if let Ok(channel) = self.channel().await {
            use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
            let mut cri = RuntimeServiceClient::new(channel);
            let pods = cri
                .list_pod_sandbox(k8s_cri::v1::ListPodSandboxRequest { filter: None })
                .await
                .map(|r| r.into_inner().items)
                .unwrap_or_default();
            for pod in pods {
                let id = pod.id;
                if let Err(e) = cri
                    .stop_pod_sandbox(k8s_cri::v1::StopPodSandboxRequest {
                        pod_sandbox_id: id.clone(),
                    })
                    .await
                {
                    tracing::warn!(pod = %id, error = %e, "stopping a pod sandbox");
                }
                if let Err(e) = cri
                    .remove_pod_sandbox(k8s_cri::v1::RemovePodSandboxRequest {
                        pod_sandbox_id: id.clone(),
                    })
                    .await
                {
                    tracing::warn!(pod = %id, error = %e, "removing a pod sandbox");
                }
            }
        }
        // Stopping waits for processes to go: not on an async worker thread.
        let _ = tokio::task::spawn_blocking(move || self.stop()).await;
    }

    /// Stops containerd (SIGTERM, then SIGKILL after a few seconds), kills the shims it
    /// started and their containers, removes their cgroups and detaches mounts left under its
    /// directory.
    pub fn stop(&mut self) {
        self.halt(true);
    }

    /// Stops containerd alone: its shims and containers keep running, and a containerd
    /// started later on the same directory takes them over (as across a k3s restart).
    pub fn stop_keeping_containers(&mut self) {
        self.halt(false);
    }

    fn halt(&mut self, everything: bool) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let socket = self.config.socket().to_string_lossy().into_owned();
        let table = if everything {
            process_table()
        } else {
            Vec::new()
        };
        let shims: Vec<i32> = table
            .iter()
            .filter(|p| is_shim_of(&p.cmdline, &socket))
            .map(|p| p.pid)
            .collect();
        let doomed = descendants(&table, &shims);
        // Their cgroups, to remove once they are dead (containerd would on a clean delete).
        let cgroup_mounts = cgroup_mounts();
        let own: HashSet<PathBuf> = cgroup_dirs("self", &cgroup_mounts).into_iter().collect();
        let mut cgroups: Vec<PathBuf> = doomed
            .iter()
            .flat_map(|pid| cgroup_dirs(&pid.to_string(), &cgroup_mounts))
            .filter(|d| !own.contains(d))
            .collect();
        cgroups.sort();
        cgroups.dedup();

        let pid = child.id() as i32;
        terminate_group(pid, || matches!(child.try_wait(), Ok(Some(_))));
        let _ = child.wait();
        let _ = std::fs::remove_file(self.config.pid_path());
        if !everything {
            return;
        }

        // Containers first (what the shims run), then the shims.
        for &pid in doomed.iter().chain(shims.iter()) {
            if let Some(p) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let all: Vec<i32> = doomed.iter().chain(shims.iter()).copied().collect();
        while Instant::now() < deadline && all.iter().any(|&p| alive(p)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        if !shims.is_empty() {
            tracing::info!(
                shims = shims.len(),
                processes = doomed.len(),
                "killed containerd's shims and containers"
            );
        }
        for dir in cgroups.iter().rev() {
            if let Err(e) = std::fs::remove_dir(dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(cgroup = %dir.display(), error = %e, "removing a container's cgroup");
            }
        }
        unmount_under(&self.config.dir);
    }
}

/// SIGTERM to a process group, then SIGKILL if `exited` does not turn true within 5 s.
fn terminate_group(pgid: i32, mut exited: impl FnMut() -> bool) {
    let Some(pgid) = rustix::process::Pid::from_raw(pgid) else {
        return;
    };
    let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::TERM);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if exited() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    tracing::warn!(
        pid = pgid.as_raw_nonzero().get(),
        "containerd ignored SIGTERM; killing it"
    );
    let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
}

/// A containerd that an earlier run of ours left behind on the same directory (its parent was
/// killed before it could stop it) would hold the metadata database: stop it first.
fn stop_stale(config: &ContainerdConfig) {
    let Ok(text) = std::fs::read_to_string(config.pid_path()) else {
        return;
    };
    let Ok(pid) = text.trim().parse::<i32>() else {
        return;
    };
    let ours = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).contains(&*config.config_path().to_string_lossy()))
        .unwrap_or(false);
    if ours && alive(pid) {
        tracing::warn!(pid, "stopping a containerd left running on this directory");
        terminate_group(pid, || !alive(pid));
    }
}

/// A mounted cgroup hierarchy: v1 with its controllers (and `name=`), or v2.
struct CgroupMount {
    point: PathBuf,
    root: String,
    v2: bool,
    options: Vec<String>,
}

fn cgroup_mounts() -> Vec<CgroupMount> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines() {
        // id parent major:minor root mount-point options [optional...] - fstype source super
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 5 || r.len() < 3 || !(r[0] == "cgroup" || r[0] == "cgroup2") {
            continue;
        }
        out.push(CgroupMount {
            point: PathBuf::from(unescape_octal(l[4])),
            root: unescape_octal(l[3]),
            v2: r[0] == "cgroup2",
            options: r[2].split(',').map(String::from).collect(),
        });
    }
    out
}

/// The cgroup directories (below the hierarchies' roots) a process is in.
fn cgroup_dirs(pid: &str, mounts: &[CgroupMount]) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let mount = if controllers.is_empty() {
            mounts.iter().find(|m| m.v2)
        } else {
            mounts.iter().find(|m| {
                !m.v2
                    && controllers
                        .split(',')
                        .all(|c| m.options.iter().any(|o| o == c))
            })
        };
        let Some(mount) = mount else { continue };
        let Some(rel) = path
            .strip_prefix(mount.root.trim_end_matches('/'))
            .map(|r| r.trim_start_matches('/'))
        else {
            continue;
        };
        if !rel.is_empty() {
            out.push(mount.point.join(rel));
        }
    }
    out
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Proc {
    pid: i32,
    ppid: i32,
    cmdline: Vec<String>,
}

fn process_table() -> Vec<Proc> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces and parentheses.
        let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| {
                b.split(|&c| c == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        out.push(Proc { pid, ppid, cmdline });
    }
    out
}

/// A containerd shim started by the containerd at `socket`: it was told `-address <socket>`.
fn is_shim_of(cmdline: &[String], socket: &str) -> bool {
    let Some(bin) = cmdline.first() else {
        return false;
    };
    if !bin.contains("containerd-shim") {
        return false;
    }
    cmdline
        .windows(2)
        .any(|w| (w[0] == "-address" || w[0] == "--address") && w[1] == socket)
        || cmdline.iter().any(|a| {
            a.strip_prefix("-address=")
                .or_else(|| a.strip_prefix("--address="))
                == Some(socket)
        })
}

fn descendants(table: &[Proc], roots: &[i32]) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in table {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut seen: HashSet<i32> = roots.iter().copied().collect();
    let mut out = Vec::new();
    let mut stack: Vec<i32> = roots.to_vec();
    while let Some(pid) = stack.pop() {
        for &c in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            if seen.insert(c) {
                out.push(c);
                stack.push(c);
            }
        }
    }
    out
}

/// Whether a process exists and is not a zombie.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Mount points from /proc/self/mountinfo (octal escapes undone).
fn mount_points() -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(unescape_octal(m)))
        .collect()
}

fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Detaches every mount at or under `dir`, deepest first.
pub fn unmount_under(dir: &Path) {
    for _ in 0..10 {
        let mut found: Vec<PathBuf> = mount_points()
            .into_iter()
            .filter(|m| m.starts_with(dir))
            .collect();
        if found.is_empty() {
            return;
        }
        found.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
        found.dedup();
        for m in &found {
            if let Err(e) = rustix::mount::unmount(m, rustix::mount::UnmountFlags::DETACH) {
                tracing::warn!(mount = %m.display(), error = %e, "unmounting");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_names_everything_under_the_dir() {
        let mut c = ContainerdConfig::new("/tmp/x y");
        c.runc = PathBuf::from("/usr/sbin/runc");
        c.cni_plugin = None;
        let text = c.render();
        for want in [
            r#"root = "/tmp/x y/root""#,
            r#"state = "/tmp/x y/state""#,
            r#"address = "/tmp/x y/containerd.sock""#,
            r#"address = "/tmp/x y/containerd.sock.ttrpc""#,
            r#"path = "/tmp/x y/opt""#,
            r#"sandbox_image = "registry.k8s.io/pause:3.9""#,
            "restrict_oom_score_adj = true",
            r#"stream_server_address = "127.0.0.1""#,
            r#"stream_server_port = "0""#,
            r#"snapshotter = "overlayfs""#,
            r#"runtime_type = "io.containerd.runc.v2""#,
            r#"pod_annotations = ["io.containerd.runc.v2.group"]"#,
            r#"BinaryName = "/usr/sbin/runc""#,
            r#"Root = "/tmp/x y/runc""#,
            "SystemdCgroup = false",
            r#"bin_dir = "/usr/lib/cni""#,
            r#"conf_dir = "/tmp/x y/cni""#,
            "max_conf_num = 1",
        ] {
            assert!(text.contains(want), "missing {want:?} in\n{text}");
        }
    }

    #[test]
    fn own_cni_plugin_gets_a_directory_of_links() {
        let mut c = ContainerdConfig::new("/tmp/x");
        c.cni_plugin = Some(PathBuf::from("/opt/minik8s-cni"));
        assert!(c.render().contains(r#"bin_dir = "/tmp/x/cni-bin""#));
        assert_eq!(
            c.cni_links(),
            vec![
                ("minik8s-bridge".into(), PathBuf::from("/opt/minik8s-cni")),
                ("loopback".into(), PathBuf::from("/opt/minik8s-cni")),
                ("portmap".into(), PathBuf::from("/usr/lib/cni/portmap")),
                ("bridge".into(), PathBuf::from("/usr/lib/cni/bridge")),
                (
                    "host-local".into(),
                    PathBuf::from("/usr/lib/cni/host-local")
                ),
            ]
        );
    }

    #[test]
    fn finds_shims_by_their_socket() {
        let args = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let sock = "/tmp/a/containerd.sock";
        assert!(is_shim_of(
            &args(
                "/usr/bin/containerd-shim-runc-v2 -namespace k8s.io -id abc -address /tmp/a/containerd.sock"
            ),
            sock
        ));
        assert!(!is_shim_of(
            &args(
                "/usr/bin/containerd-shim-runc-v2 -namespace k8s.io -id abc -address /run/containerd/containerd.sock"
            ),
            sock
        ));
        assert!(!is_shim_of(
            &args("/bin/sleep -address /tmp/a/containerd.sock"),
            sock
        ));
    }

    #[test]
    fn descendants_are_transitive() {
        let p = |pid, ppid| Proc {
            pid,
            ppid,
            cmdline: vec![],
        };
        let table = vec![p(10, 1), p(11, 10), p(12, 11), p(13, 1), p(14, 12)];
        let mut d = descendants(&table, &[10]);
        d.sort();
        assert_eq!(d, [11, 12, 14]);
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_octal(r"/tmp/a\040b"), "/tmp/a b");
        assert_eq!(unescape_octal(r"/tmp/plain"), "/tmp/plain");
        assert_eq!(unescape_octal(r"/tmp/x\"), r"/tmp/x\");
    }
}
