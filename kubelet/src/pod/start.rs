//! Starting containers: the image as its pull policy asks, then the environment, volumes and
//! CRI config, then create and start, each failure left as the Waiting reason the next status
//! reports. Init, app and ephemeral containers all come this way, so that a debugger added
//! with `kubectl debug` gets the same image handling, mounts, environment and logs as the
//! containers it looks at.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::actions::{self, Actions};
use super::ephemeral;
use super::model::RuntimePod;
use super::spec::{self, ContainerInputs, pod_display, uid};
use super::worker::{Phases, Shared, now_ns};
use crate::env::{self, FieldContext};
use crate::runtime::RuntimeError;

/// A start that failed on the image or the config is tried again after this long.
const RETRY: Duration = Duration::from_secs(5);

/// The sandbox a container goes into.
pub(super) struct Sandbox<'a> {
    pub id: &'a str,
    pub config: &'a k8s_cri::v1::PodSandboxConfig,
    pub pod_ip: &'a str,
    pub volumes: &'a crate::volumes::PodVolumes,
}

/// Which of the pod's lists a container comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind<'a> {
    Init,
    App,
    /// With the runtime ID of the container whose processes it is to see.
    Ephemeral {
        target_id: Option<&'a str>,
    },
}

fn sooner(wait: Option<Duration>, other: Duration) -> Option<Duration> {
    Some(wait.map_or(other, |w| w.min(other)))
}

impl Shared {
    /// Makes sure the image is present as `imagePullPolicy` asks; returns its reference.
    async fn ensure_image(&self, pod: &Pod, c: &Container) -> Result<String, (String, String)> {
        let image = c.image.clone().unwrap_or_default();
        let policy = c
            .image_pull_policy
            .clone()
            .unwrap_or_else(|| minik8s_api::kinds::pod::default_pull_policy(&image).into());
        let present = self
            .runtime
            .image_status(&image)
            .await
            .map_err(|e| ("ErrImageInspect".to_string(), e.message))?;
        match (policy.as_str(), present) {
            ("Never", None) => {
                let msg =
                    format!("Container image \"{image}\" is not present with pull policy of Never");
                self.event(pod, Some(&c.name), true, "ErrImageNeverPull", msg.clone())
                    .await;
                Err(("ErrImageNeverPull".into(), msg))
            }
            ("IfNotPresent" | "Never", Some(img)) => {
                self.event(
                    pod,
                    Some(&c.name),
                    false,
                    "Pulled",
                    format!("Container image \"{image}\" already present on machine"),
                )
                .await;
                Ok(img.id)
            }
            _ => {
                let key = format!("{}/{}", uid(pod), image);
                let now = now_ns();
                let in_backoff = self
                    .memory
                    .lock()
                    .expect("kubelet memory")
                    .image_backoff
                    .in_backoff(&key, now);
                if in_backoff {
                    let msg = format!("Back-off pulling image \"{image}\"");
                    self.event(pod, Some(&c.name), false, "BackOff", msg.clone())
                        .await;
                    return Err(("ImagePullBackOff".into(), msg));
                }
                self.event(
                    pod,
                    Some(&c.name),
                    false,
                    "Pulling",
                    format!("Pulling image \"{image}\""),
                )
                .await;
                let started = std::time::Instant::now();
                match self.runtime.pull_image(&image).await {
                    Ok(r) => {
                        let msg = format!(
                            "Successfully pulled image \"{image}\" in {:?}",
                            started.elapsed()
                        );
                        self.event(pod, Some(&c.name), false, "Pulled", msg).await;
                        Ok(r)
                    }
                    Err(e) => {
                        self.memory
                            .lock()
                            .expect("kubelet memory")
                            .image_backoff
                            .next(&key, now);
                        let msg = format!("Failed to pull image \"{image}\": {}", e.message);
                        self.event(pod, Some(&c.name), true, "Failed", msg.clone())
                            .await;
                        Err(("ErrImagePull".into(), msg))
                    }
                }
            }
        }
    }

    /// Creates and starts one container, or records why it could not.
    async fn start_container(
        &self,
        pod: &Pod,
        sandbox: &Sandbox<'_>,
        c: &Container,
        attempt: u32,
        kind: Kind<'_>,
        phases: &mut Phases,
    ) -> bool {
        let pod_uid = uid(pod).to_string();
        let image = self.ensure_image(pod, c).await;
        phases.mark("image");
        let image_ref = match image {
            Ok(r) => r,
            Err((reason, message)) => {
                self.set_waiting(&pod_uid, &c.name, &reason, message);
                return false;
            }
        };
        let ctx = FieldContext {
            host_ip: &self.config.node_ip.to_string(),
            pod_ip: sandbox.pod_ip,
            node_cpu: self.node_cpu,
            node_memory: self.node_memory,
        };
        let env = env::build(&self.client, pod, c, &ctx).await;
        phases.mark("env");
        let env = match env {
            Ok(e) => e,
            Err(e) => {
                self.container_failed(pod, &c.name, "CreateContainerConfigError", e.0)
                    .await;
                return false;
            }
        };
        let env_map: BTreeMap<String, String> = env.iter().cloned().collect();
        let node_ip = self.config.node_ip.to_string();
        let ip = if actions::host_network(pod) {
            node_ip.as_str()
        } else {
            sandbox.pod_ip
        };
        let (hostname, domain) = spec::hostname_and_domain(&self.config, pod);
        let mounts = self
            .volumes
            .mounts(pod, sandbox.volumes, c, &env_map)
            .and_then(|mut m| {
                let hosts =
                    self.volumes
                        .etc_hosts_mount(pod, c, &[ip], &hostname, domain.as_deref())?;
                m.extend(hosts);
                Ok(m)
            });
        let mounts = match mounts {
            Ok(m) => m,
            Err(e) => {
                self.container_failed(pod, &c.name, "CreateContainerConfigError", e.to_string())
                    .await;
                return false;
            }
        };
        let mut config = spec::container_config(
            pod,
            c,
            ContainerInputs {
                image_ref: &image_ref,
                attempt,
                env: &env,
                mounts,
                node_memory: self.node_memory,
                init: kind == Kind::Init,
            },
        );
        if let Kind::Ephemeral { target_id } = kind {
            ephemeral::adjust(&mut config, target_id);
        }
        if let Some(devices) = &self.devices {
            match devices.run_options(pod, &c.name).await {
                Ok(options) => options.apply(&mut config),
                Err(message) => {
                    self.container_failed(pod, &c.name, "CreateContainerConfigError", message)
                        .await;
                    return false;
                }
            }
            phases.mark("devices");
        }
        let created = self
            .runtime
            .create_container(sandbox.id, config, sandbox.config.clone())
            .await;
        phases.mark("create_container");
        let id = match created {
            Ok(id) => id,
            Err(e) => {
                self.container_failed(pod, &c.name, "CreateContainerError", e.message)
                    .await;
                return false;
            }
        };
        self.event(
            pod,
            Some(&c.name),
            false,
            "Created",
            format!("Created container {}", c.name),
        )
        .await;
        phases.mark("event_created");
        let started = self.runtime.start_container(&id).await;
        phases.mark("start_container");
        if let Err(e) = started {
            self.container_failed(pod, &c.name, "RunContainerError", e.message)
                .await;
            return false;
        }
        self.clear_waiting(&pod_uid, &c.name);
        self.event(
            pod,
            Some(&c.name),
            false,
            "Started",
            format!("Started container {}", c.name),
        )
        .await;
        phases.mark("event_started");
        true
    }

    /// Starts what the plan asks for in the sandbox: the next init container, the app
    /// containers, then the ephemeral ones (their targets may have just started). Returns when
    /// to sync again, when something was held back or failed.
    pub(super) async fn start_planned(
        &self,
        pod: &Pod,
        plan: &Actions,
        rt: &RuntimePod,
        sandbox: &Sandbox<'_>,
        phases: &mut Phases,
    ) -> Result<Option<Duration>, RuntimeError> {
        let spec = pod.spec.as_ref().expect("pod spec");
        let mut requeue = None;
        // After a new sandbox, earlier containers are history: attempts continue from them.
        let current = if plan.create_sandbox.is_some() {
            None
        } else {
            Some(rt)
        };
        if let Some(i) = plan.next_init {
            let c = &spec.init_containers.as_ref().expect("init containers")[i];
            match current.and_then(|rt| self.held_back(pod, rt, c)) {
                Some(wait) => requeue = Some(wait),
                None => {
                    let attempt = rt.latest(&c.name).map(|l| l.attempt + 1).unwrap_or(0);
                    self.start_container(pod, sandbox, c, attempt, Kind::Init, phases)
                        .await;
                }
            }
        }
        for &i in &plan.start {
            let c = &spec.containers[i];
            if let Some(wait) = current.and_then(|rt| self.held_back(pod, rt, c)) {
                requeue = sooner(requeue, wait);
                continue;
            }
            let attempt = rt.latest(&c.name).map(|l| l.attempt + 1).unwrap_or(0);
            if !self
                .start_container(pod, sandbox, c, attempt, Kind::App, phases)
                .await
            {
                // Image pulls and config errors are retried after a short back-off.
                requeue = sooner(requeue, RETRY);
            }
        }
        if !self.start_ephemeral(pod, plan, sandbox, phases).await? {
            requeue = sooner(requeue, RETRY);
        }
        Ok(requeue)
    }

    /// Starts the plan's ephemeral containers, each once (attempt 0); false when one could not
    /// start, to be tried again (it was never created, so the next plan has it again).
    async fn start_ephemeral(
        &self,
        pod: &Pod,
        plan: &Actions,
        sandbox: &Sandbox<'_>,
        phases: &mut Phases,
    ) -> Result<bool, RuntimeError> {
        let spec = pod.spec.as_ref().expect("pod spec");
        let all = spec.ephemeral_containers.as_deref().unwrap_or_default();
        let target = |i: usize| {
            all[i]
                .target_container_name
                .as_deref()
                .filter(|t| !t.is_empty())
        };
        // Targets as they are now, after this sync's own kills and starts.
        let now = if plan.start_ephemeral.iter().any(|&i| target(i).is_some()) {
            Some(self.runtime_pod(uid(pod)).await?)
        } else {
            None
        };
        let mut started = true;
        for &i in &plan.start_ephemeral {
            let c = ephemeral::as_container(&all[i]);
            let target_id = match (target(i), &now) {
                (Some(t), Some(now)) => match ephemeral::target_id(now, t) {
                    Ok(id) => Some(id),
                    Err(message) => {
                        self.container_failed(pod, &c.name, "CreateContainerConfigError", message)
                            .await;
                        started = false;
                        continue;
                    }
                },
                _ => None,
            };
            tracing::info!(pod = %pod_display(pod), container = %c.name, target = ?target(i), "starting an ephemeral container");
            let kind = Kind::Ephemeral {
                target_id: target_id.as_deref(),
            };
            started &= self
                .start_container(pod, sandbox, &c, 0, kind, phases)
                .await;
        }
        Ok(started)
    }
}
