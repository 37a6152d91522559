//! The runtime's view of a pod, read back from the CRI: its sandboxes and containers, found
//! through the labels the kubelet put on them. This is the only memory of what ran: a restarted
//! kubelet rebuilds it from the runtime, so restart counts survive.

use std::collections::BTreeMap;

use k8s_cri::v1 as cri;

/// Labels and annotations the kubelet sets on sandboxes and containers (upstream's keys).
pub mod keys {
    pub const POD_NAME: &str = "io.kubernetes.pod.name";
    pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
    pub const POD_UID: &str = "io.kubernetes.pod.uid";
    pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
    pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
    pub const RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
    pub const TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
    pub const TERMINATION_GRACE: &str = "io.kubernetes.pod.terminationGracePeriod";
    pub const INIT_CONTAINER: &str = "minik8s.io/init-container";
    /// On containers from `spec.ephemeralContainers`. The kubelet needs no mark (names are
    /// unique across a pod's containers), but a runtime that only plays containers (the hollow
    /// nodes' fake) does: a debugger runs until stopped, whatever the pod's restartPolicy.
    pub const EPHEMERAL_CONTAINER: &str = "minik8s.io/ephemeral-container";
    /// The pod's restartPolicy, on its sandbox: a runtime that only plays containers (the
    /// hollow nodes' fake) needs it to know whether they may exit on their own.
    pub const RESTART_POLICY: &str = "minik8s.io/restart-policy";
    /// containerd's runc shim serves every container whose OCI spec carries the same value
    /// (containerd passes it from the sandbox's annotations: `pod_annotations`).
    pub const SHIM_GROUP: &str = "io.containerd.runc.v2.group";
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Created,
    Running,
    Exited,
    Unknown,
}

/// One container as the runtime reports it (upstream's kubecontainer.Status).
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeContainer {
    pub id: String,
    pub name: String,
    /// How many times this container was started before this one: the restart count.
    pub attempt: u32,
    pub state: State,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    pub image: String,
    pub image_ref: String,
    pub hash: String,
    pub log_path: String,
    pub sandbox_id: String,
    /// What an exited container wrote to its termination message file.
    pub termination_message: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SandboxState {
    pub id: String,
    pub attempt: u32,
    pub ready: bool,
    pub ip: Option<String>,
    pub created_at: i64,
}

/// Everything the runtime holds for one pod, newest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuntimePod {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub sandboxes: Vec<SandboxState>,
    pub containers: Vec<RuntimeContainer>,
}

impl RuntimePod {
    /// The newest container of that name, and the one before it.
    pub fn latest(&self, name: &str) -> Option<&RuntimeContainer> {
        self.containers.iter().find(|c| c.name == name)
    }

    pub fn previous(&self, name: &str) -> Option<&RuntimeContainer> {
        self.containers.iter().filter(|c| c.name == name).nth(1)
    }

    pub fn ready_sandbox(&self) -> Option<&SandboxState> {
        self.sandboxes.first().filter(|s| s.ready)
    }
}

fn ns_to_state(state: i32) -> State {
    match cri::ContainerState::try_from(state) {
        Ok(cri::ContainerState::ContainerCreated) => State::Created,
        Ok(cri::ContainerState::ContainerRunning) => State::Running,
        Ok(cri::ContainerState::ContainerExited) => State::Exited,
        _ => State::Unknown,
    }
}

/// Builds a container's state from its CRI status (labels carry who it belongs to).
pub fn container_from_status(status: &cri::ContainerStatus, sandbox_id: &str) -> RuntimeContainer {
    let labels = &status.labels;
    let annotations = &status.annotations;
    RuntimeContainer {
        id: status.id.clone(),
        name: labels
            .get(keys::CONTAINER_NAME)
            .cloned()
            .or_else(|| status.metadata.as_ref().map(|m| m.name.clone()))
            .unwrap_or_default(),
        attempt: status.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
        state: ns_to_state(status.state),
        created_at: status.created_at,
        started_at: status.started_at,
        finished_at: status.finished_at,
        exit_code: status.exit_code,
        reason: status.reason.clone(),
        message: status.message.clone(),
        image: status
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default(),
        image_ref: status.image_ref.clone(),
        hash: annotations
            .get(keys::CONTAINER_HASH)
            .cloned()
            .unwrap_or_default(),
        log_path: status.log_path.clone(),
        sandbox_id: sandbox_id.to_string(),
        termination_message: (ns_to_state(status.state) == State::Exited)
            .then(|| {
                let path = annotations
                    .get(keys::TERMINATION_MESSAGE_PATH)
                    .map(String::as_str)
                    .unwrap_or("");
                crate::volumes::read_termination_message(&status.mounts, path)
            })
            .flatten(),
    }
}

/// Groups the runtime's sandboxes and container statuses by pod UID.
pub fn group_by_pod(
    sandboxes: &[cri::PodSandbox],
    sandbox_ips: &BTreeMap<String, String>,
    containers: &[(cri::Container, cri::ContainerStatus)],
) -> BTreeMap<String, RuntimePod> {
    let mut pods: BTreeMap<String, RuntimePod> = BTreeMap::new();
    for s in sandboxes {
        let Some(uid) = s.labels.get(keys::POD_UID) else {
            continue;
        };
        let pod = pods.entry(uid.clone()).or_default();
        pod.uid = uid.clone();
        if let Some(m) = &s.metadata {
            pod.name = m.name.clone();
            pod.namespace = m.namespace.clone();
        }
        pod.sandboxes.push(SandboxState {
            id: s.id.clone(),
            attempt: s.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
            ready: s.state == cri::PodSandboxState::SandboxReady as i32,
            ip: sandbox_ips.get(&s.id).cloned().filter(|ip| !ip.is_empty()),
            created_at: s.created_at,
        });
    }
    for (c, status) in containers {
        let Some(uid) = c.labels.get(keys::POD_UID) else {
            continue;
        };
        let pod = pods.entry(uid.clone()).or_default();
        pod.uid = uid.clone();
        pod.containers
            .push(container_from_status(status, &c.pod_sandbox_id));
    }
    for pod in pods.values_mut() {
        pod.sandboxes
            .sort_by_key(|s| std::cmp::Reverse(s.created_at));
        pod.containers.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then(b.attempt.cmp(&a.attempt))
        });
    }
    pods
}
