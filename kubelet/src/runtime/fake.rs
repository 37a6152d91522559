//! An in-memory runtime for tests: it keeps sandboxes, containers and images as a runtime
//! would, records every call, and lets a test make containers exit.
//!
//! It is also the runtime of hollow nodes ([`FakeRuntime::hollow`]), as kubemark runs the real
//! kubelet on a fake CRI: pulls succeed, pods get addresses from the node's pod range (strings
//! only, nothing touches the host network), and containers play the part the pod's
//! annotations give them (the light hollow nodes' annotations, read from the sandbox config
//! the kubelet copies them into): containers of pods whose restartPolicy is not Always exit
//! with `hollow.minik8s.io/exit-code` (default 0) after `hollow.minik8s.io/run-seconds`
//! (default 0); init containers exit 0 at once; ephemeral containers run until stopped;
//! readiness probes fail while `hollow.minik8s.io/ready` was "false" when the sandbox was made.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_cri::v1 as cri;

use super::pod_ips::PodIps;
use super::{Result, Runtime, RuntimeError};
use crate::probe::Kind;

mod hollow;

pub use hollow::{EXIT_CODE_ANNOTATION, READY_ANNOTATION, RUN_SECONDS_ANNOTATION};

#[derive(Clone, Debug)]
struct Sandbox {
    config: cri::PodSandboxConfig,
    ready: bool,
    created_at: i64,
    ip: String,
}

impl Ctr {
    fn exited(&mut self, code: i32, reason: &str, now: i64) {
        self.state = cri::ContainerState::ContainerExited;
        self.exit_code = code;
        self.finished_at = now;
        self.reason = reason.into();
    }
}

#[derive(Clone, Debug)]
struct Ctr {
    sandbox: String,
    config: cri::ContainerConfig,
    state: cri::ContainerState,
    created_at: i64,
    started_at: i64,
    finished_at: i64,
    exit_code: i32,
    reason: String,
}

#[derive(Default)]
struct State {
    clock: i64,
    next_id: u64,
    next_ip: u8,
    sandboxes: BTreeMap<String, Sandbox>,
    containers: BTreeMap<String, Ctr>,
    images: BTreeSet<String>,
    calls: Vec<String>,
    /// Exit codes for ExecSync by container ID (0 when absent).
    exec_exit: BTreeMap<String, i32>,
    /// Resource usage by container ID, as ListContainerStats reports it.
    stats: BTreeMap<String, Usage>,
    /// The streaming server exec, attach and port-forward URLs point at.
    stream_base: Option<String>,
    /// The streaming requests made, as `exec <container> <cmd...>` and the like.
    streams: Vec<String>,
    /// Hollow mode: the node's pod range, once the kubelet hands it over.
    pod_ips: Option<PodIps>,
}

/// What a fake container uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub cpu_core_nanos: u64,
    pub nano_cores: u64,
    pub working_set_bytes: u64,
    pub usage_bytes: u64,
    pub writable_layer_bytes: u64,
}

#[derive(Default)]
pub struct FakeRuntime {
    /// Shared with the timers that make hollow containers exit.
    state: Arc<Mutex<State>>,
    hollow: bool,
}

fn not_found(op: &'static str, id: &str) -> RuntimeError {
    RuntimeError {
        operation: op,
        code: tonic::Code::NotFound,
        message: format!("{id} not found"),
    }
}

/// Image names as the CRI normalizes them.
fn normalize(image: &str) -> String {
    let with_tag = if image
        .rsplit('/')
        .next()
        .is_some_and(|last| last.contains(':') || last.contains('@'))
    {
        image.to_string()
    } else {
        format!("{image}:latest")
    };
    match with_tag.split('/').count() {
        1 => format!("docker.io/library/{with_tag}"),
        2 if !with_tag
            .split('/')
            .next()
            .is_some_and(|h| h.contains('.') || h.contains(':')) =>
        {
            format!("docker.io/{with_tag}")
        }
        _ => with_tag,
    }
}

impl FakeRuntime {
    pub fn with_images(images: &[&str]) -> Self {
        let f = FakeRuntime::default();
        f.state.lock().expect("fake").images = images.iter().map(|i| normalize(i)).collect();
        f
    }

    /// The runtime of a hollow node: see the module documentation. Its network is not ready
    /// until the kubelet hands it the node's pod range.
    pub fn hollow() -> Self {
        FakeRuntime {
            hollow: true,
            ..Default::default()
        }
    }

    /// Wall-clock nanoseconds, strictly increasing between calls.
    fn tick(s: &mut State) -> i64 {
        let now = jiff::Timestamp::now().as_nanosecond() as i64;
        s.clock = now.max(s.clock + 1);
        s.clock
    }

    pub fn calls(&self) -> Vec<String> {
        self.state.lock().expect("fake").calls.clone()
    }

    /// Makes the running container named `name` (in the pod with `pod_uid`) exit.
    pub fn exit(&self, pod_uid: &str, name: &str, code: i32, reason: &str) -> bool {
        let mut s = self.state.lock().expect("fake");
        let now = Self::tick(&mut s);
        let target = s
            .containers
            .iter_mut()
            .filter(|(_, c)| {
                c.config
                    .labels
                    .get(crate::pod::model::keys::POD_UID)
                    .map(String::as_str)
                    == Some(pod_uid)
            })
            .filter(|(_, c)| c.config.metadata.as_ref().is_some_and(|m| m.name == name))
            .find(|(_, c)| c.state == cri::ContainerState::ContainerRunning);
        match target {
            Some((_, c)) => {
                c.exited(code, reason, now);
                true
            }
            None => false,
        }
    }

    /// Removes a container behind the kubelet's back.
    pub fn remove_behind_back(&self, pod_uid: &str, name: &str) {
        let mut s = self.state.lock().expect("fake");
        s.containers.retain(|_, c| {
            !(c.config
                .labels
                .get(crate::pod::model::keys::POD_UID)
                .map(String::as_str)
                == Some(pod_uid)
                && c.config.metadata.as_ref().is_some_and(|m| m.name == name))
        });
    }

    pub fn set_exec_exit(&self, container_id: &str, code: i32) {
        self.state
            .lock()
            .expect("fake")
            .exec_exit
            .insert(container_id.into(), code);
    }

    /// Points streaming URLs at `base` (`http://host:port`).
    pub fn set_stream_base(&self, base: &str) {
        self.state.lock().expect("fake").stream_base = Some(base.into());
    }

    /// The streaming requests made so far.
    pub fn streams(&self) -> Vec<String> {
        self.state.lock().expect("fake").streams.clone()
    }

    fn stream_url(&self, what: String, path: &str) -> String {
        let mut s = self.state.lock().expect("fake");
        s.streams.push(what);
        let base = s
            .stream_base
            .clone()
            .unwrap_or_else(|| "http://127.0.0.1:1".into());
        format!("{base}/{path}")
    }

    /// Sets what a container uses, as its stats will report.
    pub fn set_usage(&self, container_id: &str, usage: Usage) {
        self.state
            .lock()
            .expect("fake")
            .stats
            .insert(container_id.into(), usage);
    }

    /// The config a container was created with.
    pub fn container_config(&self, id: &str) -> Option<cri::ContainerConfig> {
        let s = self.state.lock().expect("fake");
        s.containers.get(id).map(|c| c.config.clone())
    }

    /// IDs and names of running containers of a pod.
    pub fn running(&self, pod_uid: &str) -> Vec<(String, String)> {
        let s = self.state.lock().expect("fake");
        s.containers
            .iter()
            .filter(|(_, c)| {
                c.config
                    .labels
                    .get(crate::pod::model::keys::POD_UID)
                    .map(String::as_str)
                    == Some(pod_uid)
            })
            .filter(|(_, c)| c.state == cri::ContainerState::ContainerRunning)
            .map(|(id, c)| {
                (
                    id.clone(),
                    c.config.metadata.clone().unwrap_or_default().name,
                )
            })
            .collect()
    }
}

#[async_trait]
impl Runtime for FakeRuntime {
    async fn version(&self) -> Result<cri::VersionResponse> {
        Ok(cri::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "fake".into(),
            runtime_version: "1.0".into(),
            runtime_api_version: "v1".into(),
        })
    }

    async fn status(&self) -> Result<cri::StatusResponse> {
        let ready = |t: &str| cri::RuntimeCondition {
            r#type: t.into(),
            status: true,
            reason: String::new(),
            message: String::new(),
        };
        let mut network = ready("NetworkReady");
        if self.hollow && self.state.lock().expect("fake").pod_ips.is_none() {
            network.status = false;
            network.reason = "NetworkPluginNotReady".into();
            network.message = "no pod CIDR yet".into();
        }
        Ok(cri::StatusResponse {
            status: Some(cri::RuntimeStatus {
                conditions: vec![ready("RuntimeReady"), network],
            }),
            ..Default::default()
        })
    }

    async fn run_pod_sandbox(
        &self,
        config: cri::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        // As containerd configured by `containerd.rs`: runc is the only (and default) runtime.
        if !matches!(runtime_handler, "" | "runc") {
            return Err(RuntimeError {
                operation: "RunPodSandbox",
                code: tonic::Code::Unknown,
                message: format!(
                    "failed to get sandbox runtime: no runtime for {runtime_handler:?} is configured"
                ),
            });
        }
        let mut s = self.state.lock().expect("fake");
        let id = format!("sandbox-{}", s.next_id + 1);
        let ip = if self.hollow {
            Self::hollow_ip(&mut s, &id, &config)?
        } else {
            s.next_ip = s.next_ip.wrapping_add(1).max(2);
            format!("10.244.0.{}", s.next_ip)
        };
        s.next_id += 1;
        let now = Self::tick(&mut s);
        let name = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        s.calls.push(format!("RunPodSandbox {name}"));
        s.sandboxes.insert(
            id.clone(),
            Sandbox {
                config,
                ready: true,
                created_at: now,
                ip,
            },
        );
        Ok(id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        let mut s = self.state.lock().expect("fake");
        s.calls.push(format!("StopPodSandbox {id}"));
        let now = s.clock;
        for c in s
            .containers
            .values_mut()
            .filter(|c| c.sandbox == id && c.state == cri::ContainerState::ContainerRunning)
        {
            c.state = cri::ContainerState::ContainerExited;
            c.exit_code = 137;
            c.finished_at = now;
        }
        match s.sandboxes.get_mut(id) {
            Some(sb) => {
                sb.ready = false;
                Ok(())
            }
            None => Err(not_found("StopPodSandbox", id)),
        }
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        let mut s = self.state.lock().expect("fake");
        s.calls.push(format!("RemovePodSandbox {id}"));
        s.containers.retain(|_, c| c.sandbox != id);
        if let Some(ips) = s.pod_ips.as_mut() {
            ips.release(id);
        }
        s.sandboxes
            .remove(id)
            .map(|_| ())
            .ok_or_else(|| not_found("RemovePodSandbox", id))
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<cri::PodSandboxStatus> {
        let s = self.state.lock().expect("fake");
        let sb = s
            .sandboxes
            .get(id)
            .ok_or_else(|| not_found("PodSandboxStatus", id))?;
        Ok(cri::PodSandboxStatus {
            id: id.into(),
            metadata: sb.config.metadata.clone(),
            state: if sb.ready {
                cri::PodSandboxState::SandboxReady as i32
            } else {
                cri::PodSandboxState::SandboxNotready as i32
            },
            created_at: sb.created_at,
            network: Some(cri::PodSandboxNetworkStatus {
                ip: sb.ip.clone(),
                additional_ips: vec![],
            }),
            labels: sb.config.labels.clone(),
            annotations: sb.config.annotations.clone(),
            ..Default::default()
        })
    }

    async fn list_pod_sandboxes(&self) -> Result<Vec<cri::PodSandbox>> {
        let s = self.state.lock().expect("fake");
        Ok(s.sandboxes
            .iter()
            .map(|(id, sb)| cri::PodSandbox {
                id: id.clone(),
                metadata: sb.config.metadata.clone(),
                state: if sb.ready {
                    cri::PodSandboxState::SandboxReady as i32
                } else {
                    cri::PodSandboxState::SandboxNotready as i32
                },
                created_at: sb.created_at,
                labels: sb.config.labels.clone(),
                annotations: sb.config.annotations.clone(),
                runtime_handler: String::new(),
            })
            .collect())
    }

    async fn list_pod_sandboxes_labeled(
        &self,
        labels: std::collections::HashMap<String, String>,
    ) -> Result<Vec<cri::PodSandbox>> {
        let all = self.list_pod_sandboxes().await?;
        Ok(all
            .into_iter()
            .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
            .collect())
    }

    async fn list_containers_labeled(
        &self,
        labels: std::collections::HashMap<String, String>,
    ) -> Result<Vec<cri::Container>> {
        let all = self.list_containers().await?;
        Ok(all
            .into_iter()
            .filter(|c| labels.iter().all(|(k, v)| c.labels.get(k) == Some(v)))
            .collect())
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: cri::ContainerConfig,
        _sandbox: cri::PodSandboxConfig,
    ) -> Result<String> {
        let mut s = self.state.lock().expect("fake");
        if !s.sandboxes.contains_key(sandbox_id) {
            return Err(not_found("CreateContainer", sandbox_id));
        }
        s.next_id += 1;
        let id = format!("ctr-{}", s.next_id);
        let now = Self::tick(&mut s);
        let name = config
            .metadata
            .as_ref()
            .map(|m| format!("{}#{}", m.name, m.attempt))
            .unwrap_or_default();
        s.calls.push(format!("CreateContainer {name}"));
        s.containers.insert(
            id.clone(),
            Ctr {
                sandbox: sandbox_id.into(),
                config,
                state: cri::ContainerState::ContainerCreated,
                created_at: now,
                started_at: 0,
                finished_at: 0,
                exit_code: 0,
                reason: String::new(),
            },
        );
        Ok(id)
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        let mut s = self.state.lock().expect("fake");
        let now = Self::tick(&mut s);
        s.calls.push(format!("StartContainer {id}"));
        let c = s
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("StartContainer", id))?;
        c.state = cri::ContainerState::ContainerRunning;
        c.started_at = now;
        if self.hollow {
            self.play(&mut s, id);
        }
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()> {
        let mut s = self.state.lock().expect("fake");
        let now = Self::tick(&mut s);
        s.calls
            .push(format!("StopContainer {id} {timeout_seconds}"));
        let c = s
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("StopContainer", id))?;
        if c.state == cri::ContainerState::ContainerRunning {
            c.state = cri::ContainerState::ContainerExited;
            c.exit_code = 137;
            c.finished_at = now;
        }
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        let mut s = self.state.lock().expect("fake");
        s.calls.push(format!("RemoveContainer {id}"));
        s.containers
            .remove(id)
            .map(|_| ())
            .ok_or_else(|| not_found("RemoveContainer", id))
    }

    async fn list_containers(&self) -> Result<Vec<cri::Container>> {
        let s = self.state.lock().expect("fake");
        Ok(s.containers
            .iter()
            .map(|(id, c)| cri::Container {
                id: id.clone(),
                pod_sandbox_id: c.sandbox.clone(),
                metadata: c.config.metadata.clone(),
                image: c.config.image.clone(),
                image_ref: "sha256:fake".into(),
                state: c.state as i32,
                created_at: c.created_at,
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
                image_id: String::new(),
            })
            .collect())
    }

    async fn container_status(&self, id: &str) -> Result<cri::ContainerStatus> {
        let s = self.state.lock().expect("fake");
        let c = s
            .containers
            .get(id)
            .ok_or_else(|| not_found("ContainerStatus", id))?;
        Ok(cri::ContainerStatus {
            id: id.into(),
            metadata: c.config.metadata.clone(),
            state: c.state as i32,
            created_at: c.created_at,
            started_at: c.started_at,
            finished_at: c.finished_at,
            exit_code: c.exit_code,
            image: c.config.image.clone(),
            image_ref: "sha256:fake".into(),
            reason: c.reason.clone(),
            labels: c.config.labels.clone(),
            annotations: c.config.annotations.clone(),
            // As containerd reports it: under the sandbox's log directory.
            log_path: match s.sandboxes.get(&c.sandbox) {
                Some(sb) if !sb.config.log_directory.is_empty() => {
                    format!("{}/{}", sb.config.log_directory, c.config.log_path)
                }
                _ => c.config.log_path.clone(),
            },
            ..Default::default()
        })
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        _timeout_seconds: i64,
    ) -> Result<cri::ExecSyncResponse> {
        let mut s = self.state.lock().expect("fake");
        s.calls.push(format!("ExecSync {id} {}", cmd.join(" ")));
        let code = s.exec_exit.get(id).copied().unwrap_or(0);
        Ok(cri::ExecSyncResponse {
            stdout: Vec::new(),
            stderr: Vec::new(),
            exit_code: code,
        })
    }

    async fn exec(&self, req: cri::ExecRequest) -> Result<String> {
        let what = format!(
            "exec {} {} stdin={} stdout={} stderr={} tty={}",
            req.container_id,
            req.cmd.join(" "),
            req.stdin,
            req.stdout,
            req.stderr,
            req.tty
        );
        Ok(self.stream_url(what, "exec/fake"))
    }

    async fn attach(&self, req: cri::AttachRequest) -> Result<String> {
        let what = format!("attach {}", req.container_id);
        Ok(self.stream_url(what, "attach/fake"))
    }

    async fn port_forward(&self, req: cri::PortForwardRequest) -> Result<String> {
        let ports: Vec<String> = req.port.iter().map(|p| p.to_string()).collect();
        let what = format!("portforward {} {}", req.pod_sandbox_id, ports.join(","));
        Ok(self.stream_url(what, "portforward/fake"))
    }

    async fn list_container_stats(&self) -> Result<Vec<cri::ContainerStats>> {
        let s = self.state.lock().expect("fake");
        let now = s.clock;
        let v = |value| Some(cri::UInt64Value { value });
        Ok(s.containers
            .iter()
            .filter(|(_, c)| c.state == cri::ContainerState::ContainerRunning)
            .map(|(id, c)| {
                let u = s.stats.get(id).copied().unwrap_or_default();
                cri::ContainerStats {
                    attributes: Some(cri::ContainerAttributes {
                        id: id.clone(),
                        metadata: c.config.metadata.clone(),
                        labels: c.config.labels.clone(),
                        annotations: c.config.annotations.clone(),
                    }),
                    cpu: Some(cri::CpuUsage {
                        timestamp: now,
                        usage_core_nano_seconds: v(u.cpu_core_nanos),
                        usage_nano_cores: v(u.nano_cores),
                    }),
                    memory: Some(cri::MemoryUsage {
                        timestamp: now,
                        working_set_bytes: v(u.working_set_bytes),
                        usage_bytes: v(u.usage_bytes),
                        ..Default::default()
                    }),
                    writable_layer: Some(cri::FilesystemUsage {
                        timestamp: now,
                        fs_id: None,
                        used_bytes: v(u.writable_layer_bytes),
                        inodes_used: v(1),
                    }),
                    swap: None,
                }
            })
            .collect())
    }

    async fn list_pod_sandbox_stats(&self) -> Result<Vec<cri::PodSandboxStats>> {
        Ok(Vec::new())
    }

    async fn update_pod_cidr(&self, cidr: &str) -> Result<()> {
        if !self.hollow {
            return Ok(());
        }
        let mut s = self.state.lock().expect("fake");
        if s.pod_ips.as_ref().is_some_and(|ips| ips.cidr() == cidr) {
            return Ok(());
        }
        // As a CNI plugin's host-local IPAM, running pods keep what they have; new ones take
        // addresses from the new range.
        let ips = PodIps::new(cidr).map_err(|e| RuntimeError {
            operation: "UpdateRuntimeConfig",
            code: tonic::Code::InvalidArgument,
            message: e.to_string(),
        })?;
        s.pod_ips = Some(ips);
        Ok(())
    }

    async fn image_status(&self, image: &str) -> Result<Option<cri::Image>> {
        let s = self.state.lock().expect("fake");
        let name = normalize(image);
        Ok(s.images.contains(&name).then(|| cri::Image {
            id: format!("sha256:{name}"),
            repo_tags: vec![name],
            size: 1,
            ..Default::default()
        }))
    }

    async fn pull_image(&self, image: &str) -> Result<String> {
        let mut s = self.state.lock().expect("fake");
        s.calls.push(format!("PullImage {image}"));
        if self.hollow {
            let name = normalize(image);
            s.images.insert(name.clone());
            return Ok(format!("sha256:{name}"));
        }
        Err(RuntimeError {
            operation: "PullImage",
            code: tonic::Code::Unknown,
            message: format!(
                "failed to pull and unpack image \"{}\": dial tcp: lookup registry: no such host",
                normalize(image)
            ),
        })
    }

    async fn list_images(&self) -> Result<Vec<cri::Image>> {
        let s = self.state.lock().expect("fake");
        Ok(s.images
            .iter()
            .map(|i| cri::Image {
                id: format!("sha256:{i}"),
                repo_tags: vec![i.clone()],
                size: 1,
                ..Default::default()
            })
            .collect())
    }

    async fn image_fs_info(&self) -> Result<cri::ImageFsInfoResponse> {
        Ok(cri::ImageFsInfoResponse::default())
    }

    async fn simulated_probe(
        &self,
        container_id: &str,
        kind: Kind,
    ) -> Option<std::result::Result<(), String>> {
        if !self.hollow {
            return None;
        }
        let s = self.state.lock().expect("fake");
        let not_ready = s
            .containers
            .get(container_id)
            .and_then(|c| s.sandboxes.get(&c.sandbox))
            .and_then(|sb| sb.config.annotations.get(READY_ANNOTATION))
            .is_some_and(|v| v == "false");
        Some(if kind == Kind::Readiness && not_ready {
            Err(format!("hollow: {READY_ANNOTATION} is \"false\""))
        } else {
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names() {
        assert_eq!(
            super::normalize("busybox:1.36"),
            "docker.io/library/busybox:1.36"
        );
        assert_eq!(
            super::normalize("busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            super::normalize("registry.k8s.io/pause:3.9"),
            "registry.k8s.io/pause:3.9"
        );
        assert_eq!(super::normalize("me/app:1"), "docker.io/me/app:1");
    }
}
