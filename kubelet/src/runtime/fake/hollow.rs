//! The part a hollow node's containers play: when they exit and with which code, read from
//! the annotations the kubelet copies from the pod into the sandbox config, and the pod
//! addresses they get from the node's range.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use k8s_cri::v1 as cri;

use super::{FakeRuntime, State};
use crate::pod::model::keys;
use crate::runtime::{Result, RuntimeError};

pub use minik8s_api::hollow::{EXIT_CODE_ANNOTATION, READY_ANNOTATION, RUN_SECONDS_ANNOTATION};

/// When and how a hollow container exits on its own; `None`: it runs until stopped.
fn hollow_exit(
    sandbox: &cri::PodSandboxConfig,
    container: &cri::ContainerConfig,
) -> Option<(i32, Duration)> {
    if container
        .labels
        .get(keys::INIT_CONTAINER)
        .is_some_and(|v| v == "true")
    {
        return Some((0, Duration::ZERO));
    }
    if container.labels.contains_key(keys::EPHEMERAL_CONTAINER) {
        // A debugger someone attaches to: it stays until they are done with it.
        return None;
    }
    let a = &sandbox.annotations;
    if a.get(keys::RESTART_POLICY).map_or("Always", String::as_str) == "Always" {
        return None;
    }
    let code = a
        .get(EXIT_CODE_ANNOTATION)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let seconds = a
        .get(RUN_SECONDS_ANNOTATION)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Some((code, Duration::from_secs(seconds)))
}

/// containerd's reason for a container that exited by itself.
fn exit_reason(code: i32) -> &'static str {
    if code == 0 { "Completed" } else { "Error" }
}

impl FakeRuntime {
    /// Ends a hollow container the way its pod says, now or after its run time (if it is still
    /// the same running container then).
    pub(super) fn play(&self, s: &mut State, id: &str) {
        let Some(c) = s.containers.get(id) else {
            return;
        };
        let Some(sandbox) = s.sandboxes.get(&c.sandbox) else {
            return;
        };
        let Some((code, after)) = hollow_exit(&sandbox.config, &c.config) else {
            return;
        };
        if after.is_zero() {
            let now = Self::tick(s);
            if let Some(c) = s.containers.get_mut(id) {
                c.exited(code, exit_reason(code), now);
            }
            return;
        }
        let state: Weak<Mutex<State>> = Arc::downgrade(&self.state);
        let id = id.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let Some(state) = state.upgrade() else {
                return;
            };
            let mut s = state.lock().expect("fake");
            let now = Self::tick(&mut s);
            if let Some(c) = s.containers.get_mut(&id)
                && c.state == cri::ContainerState::ContainerRunning
            {
                c.exited(code, exit_reason(code), now);
            }
        });
    }

    /// The pod address of a new hollow sandbox: none with the host's network (the kubelet
    /// reports the node's), else one from the node's range.
    pub(super) fn hollow_ip(
        s: &mut State,
        id: &str,
        config: &cri::PodSandboxConfig,
    ) -> Result<String> {
        let host_network = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|c| c.namespace_options.as_ref())
            .is_some_and(|n| n.network == cri::NamespaceMode::Node as i32);
        if host_network {
            return Ok(String::new());
        }
        let unavailable = |message: String| RuntimeError {
            operation: "RunPodSandbox",
            code: tonic::Code::Unavailable,
            message,
        };
        let ips = s
            .pod_ips
            .as_mut()
            .ok_or_else(|| unavailable("network not ready: no pod CIDR yet".into()))?;
        ips.allocate(id)
            .map(|ip| ip.to_string())
            .map_err(|e| unavailable(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::runtime::Runtime;

    fn sandbox(annotations: &[(&str, &str)]) -> cri::PodSandboxConfig {
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "p".into(),
                uid: "u".into(),
                ..Default::default()
            }),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    fn container(init: bool) -> cri::ContainerConfig {
        let mut labels = HashMap::from([(keys::POD_UID.to_string(), "u".to_string())]);
        if init {
            labels.insert(keys::INIT_CONTAINER.into(), "true".into());
        }
        cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "c".into(),
                attempt: 0,
            }),
            labels,
            ..Default::default()
        }
    }

    #[test]
    fn what_containers_play() {
        let always = sandbox(&[
            (keys::RESTART_POLICY, "Always"),
            (EXIT_CODE_ANNOTATION, "3"),
        ]);
        assert_eq!(hollow_exit(&always, &container(false)), None);
        assert_eq!(
            hollow_exit(&always, &container(true)),
            Some((0, Duration::ZERO)),
            "init containers complete"
        );
        let never = sandbox(&[(keys::RESTART_POLICY, "Never")]);
        assert_eq!(
            hollow_exit(&never, &container(false)),
            Some((0, Duration::ZERO))
        );
        let job = sandbox(&[
            (keys::RESTART_POLICY, "OnFailure"),
            (EXIT_CODE_ANNOTATION, "3"),
            (RUN_SECONDS_ANNOTATION, "5"),
        ]);
        assert_eq!(
            hollow_exit(&job, &container(false)),
            Some((3, Duration::from_secs(5)))
        );
    }

    #[tokio::test]
    async fn containers_exit_after_their_run_time() {
        let fake = FakeRuntime::hollow();
        let job = sandbox(&[
            (keys::RESTART_POLICY, "Never"),
            (EXIT_CODE_ANNOTATION, "3"),
            (RUN_SECONDS_ANNOTATION, "1"),
        ]);
        assert!(
            fake.run_pod_sandbox(job.clone(), "").await.is_err(),
            "no sandbox before the node has a pod range"
        );
        fake.update_pod_cidr("100.64.7.0/24").await.unwrap();
        let sb = fake.run_pod_sandbox(job.clone(), "").await.unwrap();
        let ip = fake
            .pod_sandbox_status(&sb)
            .await
            .unwrap()
            .network
            .unwrap()
            .ip;
        assert_eq!(ip, "100.64.7.2");
        let id = fake
            .create_container(&sb, container(false), job)
            .await
            .unwrap();
        let started = std::time::Instant::now();
        fake.start_container(&id).await.unwrap();
        let state = |fake: &FakeRuntime| {
            let s = fake.state.lock().unwrap();
            let c = &s.containers[&id];
            (c.state, c.exit_code)
        };
        assert_eq!(state(&fake).0, cri::ContainerState::ContainerRunning);
        let deadline = started + Duration::from_secs(10);
        while state(&fake).0 == cri::ContainerState::ContainerRunning {
            assert!(std::time::Instant::now() < deadline, "still running");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "ran its second"
        );
        assert_eq!(state(&fake), (cri::ContainerState::ContainerExited, 3));
        let status = fake.container_status(&id).await.unwrap();
        assert_eq!(status.reason, "Error");
        assert!(status.finished_at > status.started_at);
    }
}
