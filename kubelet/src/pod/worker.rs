//! Carrying out a pod's actions against the runtime, and reporting what came of it: with
//! the `start` module, which starts containers, the one place where the kubelet changes
//! containers and writes pod status.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder};

use super::actions::{self, Actions};
use super::backoff::Backoff;
use super::model::{RuntimePod, State, group_by_pod};
use super::spec::{self, container_hash, pod_display, uid};
use super::start::Sandbox;
use super::status::{self, Inputs, ProbeState, Waiting};
use crate::config::KubeletConfig;
use crate::runtime::{Runtime, RuntimeError};

/// How long a pod whose claims are not bound waits before it is tried again without a change
/// to its claims (upstream's pod worker `backOffPeriod`).
const CLAIM_RETRY: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("runtime: {0}")]
    Runtime(#[from] RuntimeError),
    #[error("api: {0}")]
    Api(#[from] kube::Error),
}

/// What the kubelet remembers between syncs: only what it may forget on restart (back-off
/// windows, the last reason a container was held back, probe results).
#[derive(Default)]
pub struct Memory {
    pub backoff: Backoff,
    pub image_backoff: Backoff,
    /// By pod UID, then container name.
    pub waiting: HashMap<String, HashMap<String, Waiting>>,
    /// By container ID.
    pub probes: HashMap<String, ProbeState>,
    /// Containers whose liveness or startup probe failed, by ID.
    pub unhealthy: HashSet<String>,
}

/// What a sync asks of its caller.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Sync again after this long (a back-off window ends).
    pub requeue_after: Option<Duration>,
    /// The pod is finished with on this node: its worker may stop.
    pub done: bool,
    /// Running containers (ID, name) and the pod IP, for the prober.
    pub running: Vec<(String, String)>,
    pub pod_ip: String,
}

/// Everything pod syncs share.
pub struct Shared {
    pub volumes: crate::volumes::VolumeManager,
    pub prober: crate::probe::Prober,
    /// Asks the pod manager to sync a pod (by UID) soon.
    pub wake: tokio::sync::mpsc::UnboundedSender<String>,
    pub config: KubeletConfig,
    pub client: kube::Client,
    pub runtime: Arc<dyn Runtime>,
    pub recorder: Recorder,
    pub node_cpu: f64,
    pub node_memory: f64,
    pub memory: Mutex<Memory>,
    /// This kubelet's metrics (its runtime's calls are recorded by the runtime wrapper).
    pub metrics: Arc<crate::metrics::KubeletMetrics>,
    /// Device plugins' devices (`None`: this kubelet serves no device plugins).
    pub devices: Option<Arc<crate::devicemanager::DeviceManager>>,
}

/// The pod cgroup's memory limit (when every container has one) and cpu shares.
fn pod_limits(pod: &Pod) -> (Option<u64>, u64) {
    let spec = pod.spec.as_ref().expect("pod spec");
    let parse = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.and_then(|q| minik8s_api::quantity::parse(&q.0))
    };
    let mut memory = Some(0u64);
    let mut milli_cpu = 0f64;
    for c in &spec.containers {
        let r = c.resources.as_ref();
        match parse(
            r.and_then(|r| r.limits.as_ref())
                .and_then(|l| l.get("memory")),
        ) {
            Some(m) => memory = memory.map(|t| t + m as u64),
            None => memory = None,
        }
        milli_cpu += parse(
            r.and_then(|r| r.requests.as_ref())
                .and_then(|l| l.get("cpu")),
        )
        .unwrap_or(0.0)
            * 1000.0;
    }
    (memory, (milli_cpu * 1024.0 / 1000.0) as u64)
}

/// Wall time of each step of one sync, logged when the sync started something: where a pod's
/// startup latency goes.
pub(super) struct Phases {
    last: std::time::Instant,
    steps: Vec<(&'static str, Duration)>,
}

impl Phases {
    fn new() -> Self {
        Phases {
            last: std::time::Instant::now(),
            steps: Vec::new(),
        }
    }

    /// Ends the step called `name`.
    pub(super) fn mark(&mut self, name: &'static str) {
        let now = std::time::Instant::now();
        self.steps.push((name, now - self.last));
        self.last = now;
    }

    fn total(&self) -> Duration {
        self.steps.iter().map(|(_, d)| *d).sum()
    }
}

impl std::fmt::Display for Phases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (name, d)) in self.steps.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{name}={:.1}ms", d.as_secs_f64() * 1000.0)?;
        }
        Ok(())
    }
}

pub(super) fn now_ns() -> i64 {
    jiff::Timestamp::now().as_nanosecond() as i64
}

fn object_ref(pod: &Pod, field: Option<String>) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path: field,
    }
}

impl Shared {
    /// Records an event about the pod (or one of its containers), as the kubelet does.
    pub(super) async fn event(
        &self,
        pod: &Pod,
        container: Option<&str>,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        let field = container.map(|c| {
            let spec = pod.spec.as_ref();
            let init = spec
                .and_then(|s| s.init_containers.as_ref())
                .is_some_and(|i| i.iter().any(|x| x.name == c));
            let ephemeral = spec
                .and_then(|s| s.ephemeral_containers.as_ref())
                .is_some_and(|e| e.iter().any(|x| x.name == c));
            if init {
                format!("spec.initContainers{{{c}}}")
            } else if ephemeral {
                format!("spec.ephemeralContainers{{{c}}}")
            } else {
                format!("spec.containers{{{c}}}")
            }
        });
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        // Written in the background, as upstream's event broadcaster does: a pod's start does
        // not wait for the API server to store the story of it.
        let recorder = self.recorder.clone();
        let reference = object_ref(pod, field);
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::debug!(error = %e, reason = %event.reason, "recording an event failed");
            }
        });
    }

    /// An event about one of the pod's containers.
    pub async fn event_about(&self, pod: &Pod, container: &str, reason: &str, note: String) {
        self.event(pod, Some(container), true, reason, note).await;
    }

    /// The runtime's view of one pod, with full container statuses.
    pub async fn runtime_pod(&self, pod_uid: &str) -> Result<RuntimePod, RuntimeError> {
        let mine: HashMap<String, String> =
            [(super::model::keys::POD_UID.to_string(), pod_uid.to_string())].into();
        let sandboxes: Vec<cri::PodSandbox> = self
            .runtime
            .list_pod_sandboxes_labeled(mine.clone())
            .await?;
        let mut ips = BTreeMap::new();
        if let Some(latest) = sandboxes.iter().max_by_key(|s| s.created_at) {
            match self.runtime.pod_sandbox_status(&latest.id).await {
                Ok(st) => {
                    if let Some(ip) = st.network.map(|n| n.ip).filter(|ip| !ip.is_empty()) {
                        ips.insert(latest.id.clone(), ip);
                    }
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        let mut containers = Vec::new();
        for c in self.runtime.list_containers_labeled(mine).await? {
            match self.runtime.container_status(&c.id).await {
                Ok(st) => containers.push((c, st)),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(group_by_pod(&sandboxes, &ips, &containers)
            .remove(pod_uid)
            .unwrap_or_else(|| RuntimePod {
                uid: pod_uid.into(),
                ..Default::default()
            }))
    }

    /// A container could not be made: a `Failed` event with upstream's `Error: ...` note,
    /// and the Waiting reason its status shows until the next try.
    pub(super) async fn container_failed(
        &self,
        pod: &Pod,
        name: &str,
        reason: &str,
        message: String,
    ) {
        self.event(pod, Some(name), true, "Failed", format!("Error: {message}"))
            .await;
        self.set_waiting(spec::uid(pod), name, reason, message);
    }

    pub(super) fn set_waiting(&self, pod_uid: &str, name: &str, reason: &str, message: String) {
        let mut m = self.memory.lock().expect("kubelet memory");
        m.waiting.entry(pod_uid.into()).or_default().insert(
            name.into(),
            Waiting {
                reason: reason.into(),
                message,
            },
        );
    }

    pub(super) fn clear_waiting(&self, pod_uid: &str, name: &str) {
        let mut m = self.memory.lock().expect("kubelet memory");
        if let Some(w) = m.waiting.get_mut(pod_uid) {
            w.remove(name);
        }
    }

    /// Whether a crashed container is still inside its back-off window; records the wait.
    pub(super) fn held_back(&self, pod: &Pod, rt: &RuntimePod, c: &Container) -> Option<Duration> {
        let latest = rt.latest(&c.name).filter(|l| l.state == State::Exited)?;
        let key = format!("{}/{}/{}", uid(pod), c.name, container_hash(c));
        let now = now_ns();
        let mut m = self.memory.lock().expect("kubelet memory");
        if m.backoff.in_backoff_since(&key, latest.finished_at, now) {
            let left = m.backoff.remaining(&key, latest.finished_at, now);
            let message = format!(
                "back-off {:?} restarting failed container={} pod={}",
                m.backoff.get(&key),
                c.name,
                pod_display(pod)
            );
            m.waiting.entry(uid(pod).into()).or_default().insert(
                c.name.clone(),
                Waiting {
                    reason: "CrashLoopBackOff".into(),
                    message,
                },
            );
            return left.or(Some(Duration::from_millis(100)));
        }
        m.backoff.next(&key, latest.finished_at);
        None
    }

    /// Stops a container: preStop hook, then SIGTERM, then SIGKILL once the grace period ends.
    async fn kill_container(&self, pod: &Pod, id: &str, name: &str, message: &str, grace: i64) {
        let c = pod.spec.as_ref().and_then(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .find(|c| c.name == name)
                .cloned()
        });
        if !message.is_empty() {
            self.event(
                pod,
                Some(name),
                false,
                "Killing",
                format!("Stopping container {name}"),
            )
            .await;
        }
        let started = std::time::Instant::now();
        let pre_stop = c
            .as_ref()
            .and_then(|c| c.lifecycle.as_ref())
            .and_then(|l| l.pre_stop.as_ref());
        if let Some(exec) = pre_stop.and_then(|h| h.exec.as_ref()) {
            let cmd = exec.command.clone().unwrap_or_default();
            if let Err(e) = self.runtime.exec_sync(id, cmd, grace.max(1)).await {
                tracing::debug!(container = name, error = %e, "preStop hook failed");
            }
        } else if let Some(sleep) = pre_stop.and_then(|h| h.sleep.as_ref()) {
            // The sleep action (KEP-3960): the container keeps running, within the grace
            // period, so that whoever routes to it stops first.
            let seconds = sleep.seconds.clamp(0, grace.max(0));
            tokio::time::sleep(std::time::Duration::from_secs(seconds as u64)).await;
        }
        let left = (grace - started.elapsed().as_secs() as i64).max(if grace > 0 { 2 } else { 0 });
        if let Err(e) = self.runtime.stop_container(id, left).await
            && !e.is_not_found()
        {
            tracing::warn!(container = name, error = %e, "stopping a container failed");
        }
    }

    fn grace_period(pod: &Pod) -> i64 {
        pod.metadata
            .deletion_grace_period_seconds
            .or(pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds))
            .unwrap_or(30)
    }

    /// Stops every container and the sandboxes of the pod.
    async fn kill_pod(&self, pod: &Pod, rt: &RuntimePod) -> Result<(), RuntimeError> {
        let grace = Self::grace_period(pod);
        let running: Vec<_> = rt
            .containers
            .iter()
            .filter(|c| c.state == State::Running || c.state == State::Created)
            .collect();
        futures::future::join_all(
            running
                .iter()
                .map(|c| self.kill_container(pod, &c.id, &c.name, "stopping pod", grace)),
        )
        .await;
        for s in rt.sandboxes.iter().filter(|s| s.ready) {
            if let Err(e) = self.runtime.stop_pod_sandbox(&s.id).await
                && !e.is_not_found()
            {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Removes what is left of a pod in the runtime.
    pub async fn remove_pod(&self, rt: &RuntimePod) -> Result<(), RuntimeError> {
        for c in &rt.containers {
            if c.state == State::Running {
                let _ = self.runtime.stop_container(&c.id, 0).await;
            }
            match self.runtime.remove_container(&c.id).await {
                Err(e) if !e.is_not_found() => return Err(e),
                _ => {}
            }
        }
        for s in &rt.sandboxes {
            // A stopped sandbox is not stopped again: containerd tears its network down on
            // every StopPodSandbox (each a round of CNI DEL execs), and RemovePodSandbox
            // stops whatever is left anyway.
            if s.ready {
                let _ = self.runtime.stop_pod_sandbox(&s.id).await;
            }
            match self.runtime.remove_pod_sandbox(&s.id).await {
                Err(e) if !e.is_not_found() => return Err(e),
                _ => {}
            }
        }
        if let Err(e) = self.volumes.teardown(&rt.uid).await {
            tracing::warn!(pod_uid = %rt.uid, error = %e, "tearing down volumes failed");
        }
        let pod_cgroups = crate::cgroups::pod_cgroup_candidates(&self.config.cgroup_root, &rt.uid)
            .filter(|_| self.config.manage_host);
        for cgroup in pod_cgroups {
            if let Err(e) = crate::cgroups::remove(&self.config.cgroups_path, &cgroup) {
                tracing::warn!(pod_uid = %rt.uid, error = %e, "removing the pod cgroup failed");
            }
        }
        let mut m = self.memory.lock().expect("kubelet memory");
        m.waiting.remove(&rt.uid);
        m.backoff.forget_prefix(&format!("{}/", rt.uid));
        m.image_backoff.forget_prefix(&format!("{}/", rt.uid));
        for c in &rt.containers {
            m.probes.remove(&c.id);
            m.unhealthy.remove(&c.id);
        }
        Ok(())
    }

    /// Frees the devices a pod held (it finished, or is gone).
    pub fn release_devices(&self, pod_uid: &str) {
        if let Some(devices) = &self.devices {
            devices.release(pod_uid);
        }
    }

    /// Rejects a pod that could not get its devices, as upstream's admission does: phase
    /// Failed, reason `UnexpectedAdmissionError`, and an event saying why.
    async fn reject(
        &self,
        pod: &Pod,
        e: &crate::devicemanager::AllocateError,
    ) -> Result<(), kube::Error> {
        const REASON: &str = "UnexpectedAdmissionError";
        let message = format!("Allocate failed due to {e}, which is unexpected");
        tracing::info!(pod = %pod_display(pod), %message, "pod rejected");
        self.event(pod, None, true, REASON, message.clone()).await;
        self.release_devices(uid(pod));
        let api: Api<Pod> = Api::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let patch = serde_json::json!({
            "metadata": {"uid": uid(pod)},
            "status": {
                "phase": "Failed",
                "reason": REASON,
                "message": format!("Pod was rejected: {message}"),
            }
        });
        api.patch_status(
            pod.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
        Ok(())
    }

    /// Writes the status through the status subresource when it changed.
    async fn report(&self, pod: &Pod, rt: &RuntimePod) -> Result<(), kube::Error> {
        let (waiting, probes) = {
            let m = self.memory.lock().expect("kubelet memory");
            (
                m.waiting.get(uid(pod)).cloned().unwrap_or_default(),
                m.probes.clone(),
            )
        };
        let messages: HashMap<String, String> = rt
            .containers
            .iter()
            .filter_map(|c| c.termination_message.clone().map(|m| (c.id.clone(), m)))
            .collect();
        let host_ip = self.config.node_ip.to_string();
        let new = status::generate(&Inputs {
            pod,
            runtime: rt,
            waiting: &waiting,
            probes: &probes,
            host_ip: &host_ip,
            messages: &messages,
            now: Time(
                jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
                    .unwrap_or_default(),
            ),
        });
        if pod.status.as_ref() == Some(&new) {
            return Ok(());
        }
        let api: Api<Pod> = Api::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let patch = serde_json::json!({"metadata": {"uid": uid(pod)}, "status": new});
        api.patch_status(
            pod.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
        let phase = |s: Option<&k8s_openapi::api::core::v1::PodStatus>| {
            s.and_then(|s| s.phase.clone()).unwrap_or_default()
        };
        let was = phase(pod.status.as_ref());
        if phase(Some(&new)) == "Running" && (was.is_empty() || was == "Pending") {
            self.metrics.pod_running(uid(pod));
        }
        Ok(())
    }

    /// The CRI handler of the pod's RuntimeClass (empty: the runtime's default), read when a
    /// sandbox is made, as upstream's RuntimeClass manager does.
    async fn runtime_handler(&self, pod: &Pod) -> Result<String, RuntimeError> {
        let Some(name) = pod
            .spec
            .as_ref()
            .and_then(|s| s.runtime_class_name.as_deref())
            .filter(|n| !n.is_empty())
        else {
            return Ok(String::new());
        };
        let failed = |code, message| RuntimeError {
            operation: "RunPodSandbox",
            code,
            message,
        };
        match Api::<RuntimeClass>::all(self.client.clone())
            .get_opt(name)
            .await
        {
            Ok(Some(rc)) => Ok(rc.handler),
            Ok(None) => Err(failed(
                tonic::Code::NotFound,
                format!("RuntimeClass {name:?} not found"),
            )),
            Err(e) => Err(failed(
                tonic::Code::Unavailable,
                format!("looking up RuntimeClass {name:?}: {e}"),
            )),
        }
    }

    /// The pod's cgroup, then its sandbox.
    async fn create_sandbox(
        &self,
        pod: &Pod,
        attempt: u32,
        sandbox: &cri::PodSandboxConfig,
        phases: &mut Phases,
    ) -> Result<String, RuntimeError> {
        tracing::info!(pod = %pod_display(pod), attempt, "creating sandbox");
        let (memory, shares) = pod_limits(pod);
        if self.config.manage_host
            && let Err(e) = crate::cgroups::create(
                &self.config.cgroups_path,
                &spec::pod_cgroup(&self.config, pod),
                memory,
                shares,
            )
        {
            tracing::warn!(pod = %pod_display(pod), error = %e, "creating the pod cgroup failed");
        }
        phases.mark("cgroup");
        let created = match self.runtime_handler(pod).await {
            Ok(handler) => {
                self.runtime
                    .run_pod_sandbox(sandbox.clone(), &handler)
                    .await
            }
            Err(e) => Err(e),
        };
        phases.mark("run_pod_sandbox");
        if let Err(e) = &created {
            self.event(
                pod,
                None,
                true,
                "FailedCreatePodSandBox",
                format!("Failed to create pod sandbox: {}", e.message),
            )
            .await;
        }
        created
    }

    /// One sync of one pod: bring the runtime in line with the spec, then report.
    pub async fn sync(&self, pod: &Pod) -> Result<Outcome, SyncError> {
        let pod_uid = uid(pod).to_string();
        let mut phases = Phases::new();
        let rt = self.runtime_pod(&pod_uid).await?;
        phases.mark("runtime_pod");
        if pod.metadata.deletion_timestamp.is_some() {
            return self.terminate(pod, rt).await;
        }
        let terminal = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        if terminal {
            self.release_devices(&pod_uid);
            if rt.sandboxes.iter().any(|s| s.ready)
                || rt.containers.iter().any(|c| c.state == State::Running)
            {
                self.kill_pod(pod, &rt).await?;
            }
            return Ok(Outcome::default());
        }
        if let Some(devices) = &self.devices
            && let Err(e) = devices.admit(pod).await
        {
            self.reject(pod, &e).await?;
            return Ok(Outcome::default());
        }
        let spec = pod.spec.as_ref().expect("pod spec");
        let hashes: Vec<String> = spec.containers.iter().map(container_hash).collect();
        let unhealthy = self
            .memory
            .lock()
            .expect("kubelet memory")
            .unhealthy
            .clone();
        let plan: Actions = actions::compute(pod, &rt, &hashes, &unhealthy);
        let mut outcome = Outcome::default();
        if plan.kill_pod {
            self.kill_pod(pod, &rt).await?;
        }
        for k in &plan.kill {
            self.kill_container(pod, &k.id, &k.name, &k.message, Self::grace_period(pod))
                .await;
            self.memory
                .lock()
                .expect("kubelet memory")
                .unhealthy
                .remove(&k.id);
        }
        let needs_volumes = plan.create_sandbox.is_some()
            || plan.next_init.is_some()
            || !plan.start.is_empty()
            || !plan.start_ephemeral.is_empty();
        let volumes = if needs_volumes {
            match self.volumes.setup(pod).await {
                Ok(v) => v,
                Err(e) => {
                    // Containers wait (ContainerCreating) until the volumes can be set up.
                    self.event(pod, None, true, e.reason(), e.to_string()).await;
                    if e.reason() == "CreateContainerConfigError" {
                        let ephemeral = plan
                            .start_ephemeral
                            .iter()
                            .filter_map(|&i| spec.ephemeral_containers.as_ref()?.get(i))
                            .map(|e| &e.name);
                        for name in spec.containers.iter().map(|c| &c.name).chain(ephemeral) {
                            self.set_waiting(
                                &pod_uid,
                                name,
                                "CreateContainerConfigError",
                                e.to_string(),
                            );
                        }
                    }
                    let rt = self.runtime_pod(&pod_uid).await?;
                    self.report(pod, &rt).await?;
                    // A pod waiting on claims is woken when one changes (the kubelet watches
                    // them); past that, upstream's pod worker back-off.
                    let retry = if e.waits_on_claims() {
                        CLAIM_RETRY
                    } else {
                        Duration::from_secs(2)
                    };
                    return Ok(Outcome {
                        requeue_after: Some(retry),
                        ..Default::default()
                    });
                }
            }
        } else {
            if let Err(e) = self.volumes.refresh(pod).await {
                tracing::debug!(pod = %pod_display(pod), error = %e, "refreshing volumes failed");
            }
            Default::default()
        };
        phases.mark("volumes");
        let mut sandbox_id = plan.sandbox_id.clone();
        let attempt = plan
            .create_sandbox
            .or(rt.sandboxes.first().map(|s| s.attempt))
            .unwrap_or(0);
        let sandbox = spec::sandbox_config(&self.config, pod, attempt);
        if let Some(attempt) = plan.create_sandbox {
            sandbox_id = Some(
                self.create_sandbox(pod, attempt, &sandbox, &mut phases)
                    .await?,
            );
        }
        // A pod on the host network has the node's IP (upstream's kubelet sets it before
        // SyncPod, #24576): its containers' `status.podIP` is the node's, as its status.
        let pod_ip = match &sandbox_id {
            Some(_) if actions::host_network(pod) => self.config.node_ip.to_string(),
            Some(id) => self
                .runtime
                .pod_sandbox_status(id)
                .await
                .ok()
                .and_then(|s| s.network)
                .map(|n| n.ip)
                .unwrap_or_default(),
            None => String::new(),
        };
        phases.mark("sandbox_status");
        if let Some(sandbox_id) = sandbox_id.as_deref() {
            let into = Sandbox {
                id: sandbox_id,
                config: &sandbox,
                pod_ip: &pod_ip,
                volumes: &volumes,
            };
            outcome.requeue_after = self
                .start_planned(pod, &plan, &rt, &into, &mut phases)
                .await?;
        }
        let rt = self.runtime_pod(&pod_uid).await?;
        phases.mark("runtime_pod");
        self.report(pod, &rt).await?;
        phases.mark("status");
        if needs_volumes {
            tracing::info!(pod = %pod_display(pod), total_ms = phases.total().as_millis() as u64, %phases, "synced");
        }
        outcome.running = rt
            .containers
            .iter()
            .filter(|c| c.state == State::Running)
            .map(|c| (c.id.clone(), c.name.clone()))
            .collect();
        outcome.pod_ip = if actions::host_network(pod) {
            self.config.node_ip.to_string()
        } else {
            rt.sandboxes
                .first()
                .and_then(|s| s.ip.clone())
                .unwrap_or_default()
        };
        Ok(outcome)
    }

    /// A pod being deleted: stop it within its grace period, clean up, report, and let the
    /// API server remove it.
    async fn terminate(&self, pod: &Pod, rt: RuntimePod) -> Result<Outcome, SyncError> {
        tracing::info!(pod = %pod_display(pod), "terminating");
        self.kill_pod(pod, &rt).await?;
        let rt = self.runtime_pod(uid(pod)).await?;
        self.report(pod, &rt).await?;
        self.remove_pod(&rt).await?;
        self.release_devices(uid(pod));
        let api: Api<Pod> = Api::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api
            .delete(pod.metadata.name.as_deref().unwrap_or_default(), &params)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        Ok(Outcome {
            done: true,
            ..Default::default()
        })
    }
}
