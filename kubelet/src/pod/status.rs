//! The pod status the kubelet reports, computed from the runtime's view as upstream's
//! generateAPIPodStatus does: container states with last termination, restart counts, phase,
//! conditions and IPs. Pure, so every transition is unit-tested.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::actions::{host_network, should_restart};
use super::model::{RuntimeContainer, RuntimePod, State};

/// Why a container is waiting, when the last sync held it back (CrashLoopBackOff,
/// ErrImagePull, CreateContainerConfigError...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

/// What the prober knows of a running container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeState {
    pub ready: bool,
    pub started: bool,
}

pub struct Inputs<'a> {
    pub pod: &'a Pod,
    pub runtime: &'a RuntimePod,
    /// Keyed by container name.
    pub waiting: &'a HashMap<String, Waiting>,
    /// Keyed by container ID; containers without an entry count as not ready.
    pub probes: &'a HashMap<String, ProbeState>,
    pub host_ip: &'a str,
    /// Termination messages read from the containers' message files, by container ID.
    pub messages: &'a HashMap<String, String>,
    pub now: Time,
}

fn time(ns: i64) -> Option<Time> {
    (ns > 0).then(|| {
        Time(
            jiff::Timestamp::from_nanosecond(ns as i128)
                .map(|t| jiff::Timestamp::from_second(t.as_second()).unwrap_or(t))
                .unwrap_or_default(),
        )
    })
}

fn container_id(id: &str) -> String {
    format!("containerd://{id}")
}

fn convert(c: &RuntimeContainer, message: Option<&String>) -> ContainerState {
    match c.state {
        State::Running => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: time(c.started_at),
            }),
            ..Default::default()
        },
        State::Exited => {
            let reason = if !c.reason.is_empty() {
                c.reason.clone()
            } else if c.exit_code == 0 {
                "Completed".into()
            } else {
                "Error".into()
            };
            let msg = message
                .cloned()
                .filter(|m| !m.is_empty())
                .or_else(|| Some(c.message.clone()).filter(|m| !m.is_empty()));
            ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: c.exit_code,
                    reason: Some(reason),
                    message: msg,
                    started_at: time(c.started_at),
                    finished_at: time(c.finished_at),
                    container_id: Some(container_id(&c.id)),
                    signal: None,
                }),
                ..Default::default()
            }
        }
        State::Created | State::Unknown => ContainerState {
            waiting: Some(ContainerStateWaiting::default()),
            ..Default::default()
        },
    }
}

/// Which of the pod's lists a container is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Init,
    App,
    /// Never ready and never restarted (upstream reports them as app containers whose
    /// readiness no prober sets).
    Ephemeral,
}

fn statuses(
    inp: &Inputs<'_>,
    containers: &[k8s_openapi::api::core::v1::Container],
    kind: Kind,
) -> Vec<ContainerStatus> {
    let spec = inp.pod.spec.as_ref().expect("pod spec");
    let has_inits = spec.init_containers.as_ref().is_some_and(|i| !i.is_empty());
    let old = inp
        .pod
        .status
        .as_ref()
        .and_then(|s| match kind {
            Kind::Init => s.init_container_statuses.clone(),
            Kind::App => s.container_statuses.clone(),
            Kind::Ephemeral => s.ephemeral_container_statuses.clone(),
        })
        .unwrap_or_default();
    let init = kind == Kind::Init;
    let default_reason = if has_inits && !init {
        "PodInitializing"
    } else {
        "ContainerCreating"
    };
    let mut out = Vec::new();
    for c in containers {
        let mut status = ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(default_reason.into()),
                    message: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let old_status = old.iter().find(|o| o.name == c.name);
        if let Some(o) = old_status {
            status.restart_count = o.restart_count;
            status.last_state = o.last_state.clone();
        }
        let latest = inp.runtime.latest(&c.name);
        if let Some(l) = latest {
            status.restart_count = l.attempt as i32;
            status.container_id = Some(container_id(&l.id));
            status.image_id = l.image_ref.clone();
            status.state = Some(convert(l, inp.messages.get(&l.id)));
            if let Some(p) = inp.runtime.previous(&c.name) {
                status.last_state = Some(convert(p, inp.messages.get(&p.id)));
            }
            if l.state == State::Running {
                // Unprobed containers are started and ready as soon as they run.
                let probe = inp.probes.get(&l.id).copied();
                let started = c.startup_probe.is_none() || probe.is_some_and(|p| p.started);
                let ready = if c.readiness_probe.is_some() {
                    probe.is_some_and(|p| p.ready)
                } else {
                    started
                };
                status.ready = kind == Kind::App && ready;
                status.started = Some(started);
            } else {
                status.started = Some(false);
            }
        } else if let Some(o) =
            old_status.filter(|o| o.state.as_ref().is_some_and(|s| s.running.is_some()))
        {
            // It ran and is gone without a trace: it terminated, we know not how.
            status.last_state = Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 137,
                    reason: Some("ContainerStatusUnknown".into()),
                    message: Some("The container could not be located when the pod was deleted.  The container used to be Running".into()),
                    ..Default::default()
                }),
                ..Default::default()
            });
            if inp.pod.metadata.deletion_timestamp.is_none() && kind != Kind::Ephemeral {
                status.restart_count = o.restart_count + 1;
            }
        }
        // A container the next sync will (re)start is waiting, with the reason it is held back.
        let done_init =
            init && latest.is_some_and(|l| l.state == State::Exited && l.exit_code == 0);
        let will_start = match kind {
            Kind::Ephemeral => latest.is_none() && inp.pod.metadata.deletion_timestamp.is_none(),
            _ => !done_init && should_restart(c, inp.pod, inp.runtime),
        };
        if will_start && let Some(w) = inp.waiting.get(&c.name) {
            if status
                .state
                .as_ref()
                .is_some_and(|s| s.terminated.is_some())
            {
                status.last_state = status.state.clone();
            }
            status.state = Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(w.reason.clone()),
                    message: Some(w.message.clone()),
                }),
                ..Default::default()
            });
        }
        out.push(status);
    }
    if !init {
        out.sort_by(|a, b| a.name.cmp(&b.name));
    }
    out
}

/// Upstream's getPhase.
pub fn phase(pod: &Pod, init: &[ContainerStatus], app: &[ContainerStatus]) -> &'static str {
    let spec = pod.spec.as_ref().expect("pod spec");
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let terminated = |s: &ContainerStatus| {
        s.state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code)
    };
    let last_terminated = |s: &ContainerStatus| {
        s.last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code)
    };
    let (mut pending_init, mut failed_init) = (0, 0);
    for c in spec.init_containers.iter().flatten() {
        let Some(s) = init.iter().find(|s| s.name == c.name) else {
            pending_init += 1;
            continue;
        };
        let st = s.state.clone().unwrap_or_default();
        if st.running.is_some() {
            pending_init += 1;
        } else if let Some(code) = terminated(s) {
            if code != 0 {
                failed_init += 1;
            }
        } else if st.waiting.is_some() {
            match last_terminated(s) {
                Some(code) if code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            }
        } else {
            pending_init += 1;
        }
    }
    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for c in &spec.containers {
        let Some(s) = app.iter().find(|s| s.name == c.name) else {
            unknown += 1;
            continue;
        };
        let st = s.state.clone().unwrap_or_default();
        if st.running.is_some() {
            running += 1;
        } else if let Some(code) = terminated(s) {
            stopped += 1;
            if code == 0 {
                succeeded += 1;
            }
        } else if st.waiting.is_some() {
            if last_terminated(s).is_some() {
                stopped += 1;
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }
    if failed_init > 0 && policy == "Never" {
        return "Failed";
    }
    let any_started = app.iter().any(|s| {
        s.state
            .as_ref()
            .is_some_and(|st| st.running.is_some() || st.terminated.is_some())
    });
    if (pending_init > 0 && !any_started) || waiting > 0 {
        return "Pending";
    }
    if running > 0 && unknown == 0 {
        return "Running";
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if policy == "Always" {
            return "Running";
        }
        if stopped == succeeded {
            return "Succeeded";
        }
        if policy == "Never" {
            return "Failed";
        }
        return "Running";
    }
    "Pending"
}

fn condition(ty: &str, ok: bool, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: ty.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.map(str::to_string),
        message,
        ..Default::default()
    }
}

/// The full status to report for the pod now.
pub fn generate(inp: &Inputs<'_>) -> PodStatus {
    let pod = inp.pod;
    let spec = pod.spec.as_ref().expect("pod spec");
    let old = pod.status.clone().unwrap_or_default();
    let init = statuses(
        inp,
        spec.init_containers.as_deref().unwrap_or_default(),
        Kind::Init,
    );
    let app = statuses(inp, &spec.containers, Kind::App);
    let ephemeral = statuses(inp, &super::ephemeral::containers(pod), Kind::Ephemeral);
    let mut phase = phase(pod, &init, &app).to_string();
    // Pods never leave a terminal phase.
    if matches!(old.phase.as_deref(), Some("Succeeded" | "Failed")) {
        phase = old.phase.clone().unwrap_or_default();
    }
    let mut conditions: Vec<PodCondition> = old
        .conditions
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| {
            !matches!(
                c.type_.as_str(),
                "PodReadyToStartContainers"
                    | "Initialized"
                    | "Ready"
                    | "ContainersReady"
                    | "PodScheduled"
            )
        })
        .collect();
    let sandbox_ready = inp
        .runtime
        .ready_sandbox()
        .is_some_and(|s| host_network(pod) || s.ip.is_some());
    conditions.push(condition(
        "PodReadyToStartContainers",
        sandbox_ready,
        None,
        None,
    ));
    let incomplete: Vec<&str> = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| {
            !init.iter().any(|s| {
                s.name == c.name
                    && s.state
                        .as_ref()
                        .and_then(|st| st.terminated.as_ref())
                        .is_some_and(|t| t.exit_code == 0)
            })
        })
        .map(|c| c.name.as_str())
        .collect();
    let initialized = incomplete.is_empty()
        || app.iter().any(|s| {
            s.state
                .as_ref()
                .is_some_and(|st| st.running.is_some() || st.terminated.is_some())
        });
    conditions.push(if initialized {
        condition("Initialized", true, None, None)
    } else {
        condition(
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: [{}]",
                incomplete.join(" ")
            )),
        )
    });
    let unready: Vec<&str> = spec
        .containers
        .iter()
        .filter(|c| !app.iter().any(|s| s.name == c.name && s.ready))
        .map(|c| c.name.as_str())
        .collect();
    let containers_ready = if phase == "Succeeded" {
        condition("ContainersReady", false, Some("PodCompleted"), None)
    } else if unready.is_empty() {
        condition("ContainersReady", true, None, None)
    } else {
        condition(
            "ContainersReady",
            false,
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    };
    let mut ready = containers_ready.clone();
    ready.type_ = "Ready".into();
    conditions.push(ready);
    conditions.push(containers_ready);
    conditions.push(condition("PodScheduled", true, None, None));
    // Transition times move only when a condition's status does.
    for c in &mut conditions {
        let before = old.conditions.iter().flatten().find(|o| o.type_ == c.type_);
        c.last_transition_time = match before {
            Some(o) if o.status == c.status => o
                .last_transition_time
                .clone()
                .or_else(|| Some(inp.now.clone())),
            _ => Some(inp.now.clone()),
        };
        c.last_probe_time = None;
    }
    let (pod_ip, pod_ips) = if host_network(pod) {
        (
            Some(inp.host_ip.to_string()),
            Some(vec![PodIP {
                ip: inp.host_ip.to_string(),
            }]),
        )
    } else {
        match inp.runtime.sandboxes.first().and_then(|s| s.ip.clone()) {
            Some(ip) => (Some(ip.clone()), Some(vec![PodIP { ip }])),
            None => (old.pod_ip.clone(), old.pod_ips.clone()),
        }
    };
    PodStatus {
        phase: Some(phase),
        conditions: Some(conditions),
        host_ip: Some(inp.host_ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: inp.host_ip.to_string(),
        }]),
        pod_ip,
        pod_ips,
        start_time: old.start_time.clone().or_else(|| Some(inp.now.clone())),
        qos_class: Some(
            old.qos_class
                .clone()
                .unwrap_or_else(|| minik8s_api::kinds::pod::qos_class(spec).to_string()),
        ),
        init_container_statuses: (!init.is_empty()).then_some(init),
        container_statuses: Some(app),
        ephemeral_container_statuses: (!ephemeral.is_empty()).then_some(ephemeral),
        reason: old.reason.clone(),
        message: old.message.clone(),
        nominated_node_name: old.nominated_node_name.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::pod::model::SandboxState;

    fn pod(policy: &str, inits: &[&str], containers: &[&str]) -> Pod {
        let c = |n: &&str| serde_json::json!({"name": n, "image": "busybox:1.36"});
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"restartPolicy": policy, "nodeName": "n",
                     "initContainers": inits.iter().map(c).collect::<Vec<_>>(),
                     "containers": containers.iter().map(c).collect::<Vec<_>>()}
        }))
        .unwrap()
    }

    pub(crate) fn ctr(name: &str, state: State, exit: i32, attempt: u32) -> RuntimeContainer {
        RuntimeContainer {
            id: format!("{name}-{attempt}"),
            name: name.into(),
            attempt,
            state,
            created_at: 100 + attempt as i64,
            started_at: 1_700_000_000_000_000_000,
            finished_at: if state == State::Exited {
                1_700_000_010_000_000_000
            } else {
                0
            },
            exit_code: exit,
            reason: String::new(),
            message: String::new(),
            image: "docker.io/library/busybox:1.36".into(),
            image_ref: "sha256:abc".into(),
            hash: String::new(),
            log_path: String::new(),
            sandbox_id: "s1".into(),
            termination_message: None,
        }
    }

    pub(crate) fn runtime(containers: Vec<RuntimeContainer>) -> RuntimePod {
        RuntimePod {
            uid: "u".into(),
            sandboxes: vec![SandboxState {
                id: "s1".into(),
                attempt: 0,
                ready: true,
                ip: Some("10.244.0.7".into()),
                created_at: 1,
            }],
            containers,
            ..Default::default()
        }
    }

    fn status_of(
        pod: &Pod,
        rt: &RuntimePod,
        ready: &[&str],
        waiting: &[(&str, &str)],
    ) -> PodStatus {
        let probes = ready
            .iter()
            .map(|id| {
                (
                    id.to_string(),
                    ProbeState {
                        ready: true,
                        started: true,
                    },
                )
            })
            .collect();
        let waiting = waiting
            .iter()
            .map(|(n, r)| {
                (
                    n.to_string(),
                    Waiting {
                        reason: r.to_string(),
                        message: "m".into(),
                    },
                )
            })
            .collect();
        generate(&Inputs {
            pod,
            runtime: rt,
            waiting: &waiting,
            probes: &probes,
            host_ip: "192.168.1.10",
            messages: &HashMap::new(),
            now: Time(jiff::Timestamp::from_second(1_800_000_000).unwrap()),
        })
    }

    fn cond<'a>(s: &'a PodStatus, ty: &str) -> &'a PodCondition {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == ty)
            .unwrap()
    }

    #[test]
    fn running_and_ready() {
        let p = pod("Always", &[], &["a"]);
        let s = status_of(
            &p,
            &runtime(vec![ctr("a", State::Running, 0, 0)]),
            &["a-0"],
            &[],
        );
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.244.0.7"));
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert!(cs.ready && cs.started == Some(true));
        assert_eq!(cs.container_id.as_deref(), Some("containerd://a-0"));
        assert_eq!(cond(&s, "Ready").status, "True");
        // A readiness probe that has not passed: the conditions say which container.
        let mut p = p;
        p.spec.as_mut().unwrap().containers[0].readiness_probe = Some(Default::default());
        let s = status_of(&p, &runtime(vec![ctr("a", State::Running, 0, 0)]), &[], &[]);
        assert_eq!(
            cond(&s, "ContainersReady").message.as_deref(),
            Some("containers with unready status: [a]")
        );
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    }

    #[test]
    fn crash_loop_shows_waiting_with_last_state() {
        let p = pod("Always", &[], &["a"]);
        let rt = runtime(vec![
            ctr("a", State::Exited, 1, 2),
            ctr("a", State::Exited, 1, 1),
        ]);
        let s = status_of(&p, &rt, &[], &[("a", "CrashLoopBackOff")]);
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(cs.restart_count, 2);
        assert_eq!(
            cs.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("CrashLoopBackOff")
        );
        let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
        assert_eq!(
            s.phase.as_deref(),
            Some("Running"),
            "restarting containers keep the pod Running"
        );
    }

    #[test]
    fn phases_by_policy() {
        let done = |policy, code| {
            let p = pod(policy, &[], &["a"]);
            status_of(
                &p,
                &runtime(vec![ctr("a", State::Exited, code, 0)]),
                &[],
                &[],
            )
            .phase
            .unwrap()
        };
        assert_eq!(done("Never", 0), "Succeeded");
        assert_eq!(done("Never", 1), "Failed");
        assert_eq!(done("OnFailure", 0), "Succeeded");
        assert_eq!(done("OnFailure", 3), "Running");
        let p = pod("Always", &[], &["a"]);
        assert_eq!(
            status_of(&p, &runtime(vec![]), &[], &[]).phase.as_deref(),
            Some("Pending")
        );
        let pulling = status_of(&p, &runtime(vec![]), &[], &[("a", "ErrImagePull")]);
        assert_eq!(pulling.phase.as_deref(), Some("Pending"));
        assert_eq!(
            pulling.container_statuses.unwrap()[0]
                .state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("ErrImagePull")
        );
        let completed = done("Never", 0);
        assert_eq!(completed, "Succeeded");
    }

    #[test]
    fn init_containers() {
        let p = pod("Always", &["i1", "i2"], &["a"]);
        let s = status_of(
            &p,
            &runtime(vec![ctr("i1", State::Running, 0, 0)]),
            &[],
            &[],
        );
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(
            cond(&s, "Initialized").message.as_deref(),
            Some("containers with incomplete status: [i1 i2]")
        );
        let app = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            app.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("PodInitializing")
        );
        let s = status_of(
            &p,
            &runtime(vec![
                ctr("a", State::Running, 0, 0),
                ctr("i2", State::Exited, 0, 0),
                ctr("i1", State::Exited, 0, 0),
            ]),
            &["a-0"],
            &[],
        );
        assert_eq!(
            (s.phase.as_deref(), cond(&s, "Initialized").status.as_str()),
            (Some("Running"), "True")
        );
        let never = pod("Never", &["i1"], &["a"]);
        assert_eq!(
            status_of(
                &never,
                &runtime(vec![ctr("i1", State::Exited, 2, 0)]),
                &[],
                &[]
            )
            .phase
            .as_deref(),
            Some("Failed")
        );
    }

    #[test]
    fn terminal_phase_sticks_and_transition_times_hold() {
        let mut p = pod("Never", &[], &["a"]);
        let first = status_of(&p, &runtime(vec![ctr("a", State::Exited, 0, 0)]), &[], &[]);
        p.status = Some(first.clone());
        let again = status_of(&p, &runtime(vec![]), &[], &[]);
        assert_eq!(again.phase.as_deref(), Some("Succeeded"));
        assert_eq!(
            cond(&again, "PodScheduled").last_transition_time,
            cond(&first, "PodScheduled").last_transition_time
        );
    }
}
