//! Ephemeral containers (`kubectl debug`): containers added to a running pod to look inside
//! it. They carry a container's fields, so they start through the same path as the pod's own
//! containers (image, volumes, environment, logs) and report statuses of the same shape; the
//! rules that set them apart live with the others (actions: started once, never restarted;
//! status: never ready, no part in the pod's phase or readiness). What is theirs alone is here:
//! a debugger aimed at one container must see that container's processes.

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, EphemeralContainer};

use super::model::{RuntimePod, State, keys};

/// The container an ephemeral container is, field for field (upstream converts its
/// EphemeralContainerCommon the same way); only the target is left out.
pub fn as_container(e: &EphemeralContainer) -> Container {
    // Spelled out, so that a field k8s-openapi adds to both is not silently dropped.
    let EphemeralContainer {
        args,
        command,
        env,
        env_from,
        image,
        image_pull_policy,
        lifecycle,
        liveness_probe,
        name,
        ports,
        readiness_probe,
        resize_policy,
        resources,
        restart_policy,
        security_context,
        startup_probe,
        stdin,
        stdin_once,
        target_container_name: _,
        termination_message_path,
        termination_message_policy,
        tty,
        volume_devices,
        volume_mounts,
        working_dir,
    } = e.clone();
    Container {
        args,
        command,
        env,
        env_from,
        image,
        image_pull_policy,
        lifecycle,
        liveness_probe,
        name,
        ports,
        readiness_probe,
        resize_policy,
        resources,
        restart_policy,
        security_context,
        startup_probe,
        stdin,
        stdin_once,
        termination_message_path,
        termination_message_policy,
        tty,
        volume_devices,
        volume_mounts,
        working_dir,
    }
}

/// The pod's ephemeral containers as containers, in spec order.
pub fn containers(pod: &k8s_openapi::api::core::v1::Pod) -> Vec<Container> {
    pod.spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_ref())
        .map(|e| e.iter().map(as_container).collect())
        .unwrap_or_default()
}

/// The runtime ID of the container `target` names, whose PID namespace the debugger joins
/// (upstream's getTargetID). It must be running: the runtime finds the namespace through the
/// target's process, and a target in back-off may run again, so the debugger waits for it.
/// The error is the Waiting message.
pub fn target_id(rt: &RuntimePod, target: &str) -> Result<String, String> {
    let latest = rt
        .latest(target)
        .ok_or_else(|| format!("unable to find target container {target}"))?;
    if latest.state != State::Running {
        return Err(format!("target container {target} is not running"));
    }
    Ok(latest.id.clone())
}

/// Marks a config built for an ephemeral container and, with a target, puts it in the target's
/// PID namespace, as upstream's generateLinuxContainerConfig: only where the container would
/// otherwise get a namespace of its own (with shareProcessNamespace or hostPID it already sees
/// the target's processes).
pub fn adjust(config: &mut cri::ContainerConfig, target_id: Option<&str>) {
    config
        .labels
        .insert(keys::EPHEMERAL_CONTAINER.to_string(), "true".into());
    let Some(target_id) = target_id else {
        return;
    };
    let namespaces = config
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .and_then(|s| s.namespace_options.as_mut());
    if let Some(ns) = namespaces
        && ns.pid == cri::NamespaceMode::Container as i32
    {
        ns.pid = cri::NamespaceMode::Target as i32;
        ns.target_id = target_id.to_string();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::pod::model::RuntimeContainer;
    use crate::pod::spec::{ContainerInputs, container_config};
    use crate::pod::status::{self, Inputs, ProbeState, Waiting};

    fn debug_pod(extra: serde_json::Value) -> Pod {
        let mut dbg = serde_json::json!({
            "name": "debugger-x", "image": "busybox:1.36", "command": ["sh"],
            "args": ["-c", "ps"], "env": [{"name": "A", "value": "1"}], "workingDir": "/w",
            "volumeMounts": [{"name": "v", "mountPath": "/v"}], "tty": true, "stdin": true,
            "stdinOnce": true, "imagePullPolicy": "IfNotPresent",
            "securityContext": {"privileged": true},
            "terminationMessagePath": "/dev/t", "terminationMessagePolicy": "File",
            "targetContainerName": "app"
        });
        if let (Some(d), Some(e)) = (dbg.as_object_mut(), extra.as_object()) {
            d.extend(e.clone());
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"containers": [{"name": "app", "image": "busybox:1.36"}],
                     "ephemeralContainers": [dbg]}
        }))
        .unwrap()
    }

    #[test]
    fn an_ephemeral_container_is_its_container() {
        let pod = debug_pod(serde_json::json!({}));
        let e = &pod
            .spec
            .as_ref()
            .unwrap()
            .ephemeral_containers
            .as_ref()
            .unwrap()[0];
        let c = as_container(e);
        let mut back = serde_json::to_value(&c).unwrap();
        back["targetContainerName"] = "app".into();
        assert_eq!(back, serde_json::to_value(e).unwrap());
        assert_eq!(containers(&pod), vec![c]);
    }

    fn config(pod: &Pod, target: Option<&str>) -> cri::ContainerConfig {
        let c = &containers(pod)[0];
        let mut cfg = container_config(
            pod,
            c,
            ContainerInputs {
                image_ref: "sha256:x",
                attempt: 0,
                env: &[],
                mounts: vec![],
                node_memory: 1e9,
                init: false,
            },
        );
        adjust(&mut cfg, target);
        cfg
    }

    fn pid(cfg: &cri::ContainerConfig) -> (i32, String) {
        let ns = cfg
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.clone())
            .unwrap();
        (ns.pid, ns.target_id)
    }

    #[test]
    fn a_targeted_debugger_joins_the_targets_pid_namespace() {
        let pod = debug_pod(serde_json::json!({}));
        let cfg = config(&pod, Some("ctr-7"));
        assert_eq!(cfg.labels[keys::EPHEMERAL_CONTAINER], "true");
        assert_eq!(
            pid(&cfg),
            (cri::NamespaceMode::Target as i32, "ctr-7".into())
        );
        assert_eq!(
            pid(&config(&pod, None)),
            (cri::NamespaceMode::Container as i32, String::new())
        );
        // A pod that shares one PID namespace keeps it.
        let mut shared = pod.clone();
        shared.spec.as_mut().unwrap().share_process_namespace = Some(true);
        assert_eq!(
            pid(&config(&shared, Some("ctr-7"))),
            (cri::NamespaceMode::Pod as i32, String::new())
        );
    }

    fn ctr(name: &str, state: State) -> RuntimeContainer {
        status::tests::ctr(name, state, 0, 0)
    }

    use status::tests::runtime;

    #[test]
    fn the_target_must_run() {
        let rt = runtime(vec![ctr("app", State::Running)]);
        assert_eq!(target_id(&rt, "app"), Ok("app-0".into()));
        assert_eq!(
            target_id(&rt, "other"),
            Err("unable to find target container other".into())
        );
        let rt = runtime(vec![ctr("app", State::Exited)]);
        assert_eq!(
            target_id(&rt, "app"),
            Err("target container app is not running".into())
        );
    }

    fn generate(pod: &Pod, rt: &RuntimePod, waiting: &[(&str, &str)]) -> PodStatus {
        let waiting: HashMap<String, Waiting> = waiting
            .iter()
            .map(|(n, r)| {
                let w = Waiting {
                    reason: r.to_string(),
                    message: "m".into(),
                };
                (n.to_string(), w)
            })
            .collect();
        let probes: HashMap<String, ProbeState> = HashMap::new();
        status::generate(&Inputs {
            pod,
            runtime: rt,
            waiting: &waiting,
            probes: &probes,
            host_ip: "192.168.1.10",
            messages: &HashMap::new(),
            now: Time(jiff::Timestamp::from_second(1_800_000_000).unwrap()),
        })
    }

    fn ephemeral(s: &PodStatus) -> ContainerStatus {
        s.ephemeral_container_statuses.as_ref().unwrap()[0].clone()
    }

    fn waiting_reason(s: &ContainerStatus) -> Option<String> {
        s.state.as_ref()?.waiting.as_ref()?.reason.clone()
    }

    #[test]
    fn statuses_as_the_other_containers_but_never_ready() {
        let pod = debug_pod(serde_json::json!({}));
        let app = ctr("app", State::Running);
        let s = generate(&pod, &runtime(vec![app.clone()]), &[]);
        let e = ephemeral(&s);
        assert_eq!(
            (e.name.as_str(), e.image.as_str()),
            ("debugger-x", "busybox:1.36")
        );
        assert_eq!(waiting_reason(&e).as_deref(), Some("ContainerCreating"));
        // The image cannot be had: the reason shows until it is created.
        let s = generate(
            &pod,
            &runtime(vec![app.clone()]),
            &[("debugger-x", "ErrImageNeverPull")],
        );
        assert_eq!(
            waiting_reason(&ephemeral(&s)).as_deref(),
            Some("ErrImageNeverPull")
        );
        let running = generate(
            &pod,
            &runtime(vec![ctr("debugger-x", State::Running), app.clone()]),
            &[],
        );
        let e = ephemeral(&running);
        assert!(e.state.as_ref().unwrap().running.is_some());
        assert_eq!(
            (e.ready, e.started, e.restart_count),
            (false, Some(true), 0)
        );
        assert_eq!(e.container_id.as_deref(), Some("containerd://debugger-x-0"));
        assert_eq!(e.image_id, "sha256:abc");
        // The pod's readiness and phase are its own containers'.
        let ready = running
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(running.phase.as_deref(), Some("Running"));
        // An exited debugger stays terminated, with no waiting reason of a restart.
        let mut exited = ctr("debugger-x", State::Exited);
        exited.exit_code = 130;
        let s = generate(
            &pod,
            &runtime(vec![exited, app]),
            &[("debugger-x", "CrashLoopBackOff")],
        );
        let t = ephemeral(&s).state.unwrap().terminated.unwrap();
        assert_eq!(t.exit_code, 130);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        // No ephemeral containers, no list.
        let mut plain = pod.clone();
        plain.spec.as_mut().unwrap().ephemeral_containers = None;
        assert!(
            generate(&plain, &runtime(vec![]), &[])
                .ephemeral_container_statuses
                .is_none()
        );
    }
}
