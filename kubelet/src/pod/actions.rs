//! What to do next for one pod, given its spec and what the runtime holds: upstream's
//! computePodActions, as a pure function so that every restart rule is unit-tested.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::model::{RuntimeContainer, RuntimePod, State};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kill {
    pub id: String,
    pub name: String,
    pub message: String,
}

/// The steps one sync takes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Actions {
    /// Stop every container and the sandbox first (the sandbox is gone or changed).
    pub kill_pod: bool,
    /// Create a sandbox with this attempt number.
    pub create_sandbox: Option<u32>,
    /// The sandbox containers go into, when it is kept.
    pub sandbox_id: Option<String>,
    /// Index into `spec.initContainers` of the one to run next.
    pub next_init: Option<usize>,
    /// Indices into `spec.containers` to (re)start.
    pub start: Vec<usize>,
    /// Indices into `spec.ephemeralContainers` to start, after the others.
    pub start_ephemeral: Vec<usize>,
    pub kill: Vec<Kill>,
}

pub fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

fn restarts_on_failure(pod: &Pod) -> bool {
    restart_policy(pod) != "Never"
}

pub fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// Upstream's ShouldContainerBeRestarted.
pub fn should_restart(container: &Container, pod: &Pod, rt: &RuntimePod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(latest) = rt.latest(&container.name) else {
        return true;
    };
    match latest.state {
        State::Running => false,
        State::Unknown | State::Created => true,
        State::Exited => match restart_policy(pod) {
            "Never" => false,
            "OnFailure" => latest.exit_code != 0,
            _ => true,
        },
    }
}

fn init_failed(c: &RuntimeContainer) -> bool {
    (c.state == State::Exited && c.exit_code != 0) || c.state == State::Unknown
}

/// (last failed init container, next init container to run, done).
fn next_init_container<'a>(
    pod: &Pod,
    rt: &'a RuntimePod,
) -> (Option<&'a RuntimeContainer>, Option<usize>, bool) {
    let spec = pod.spec.as_ref().expect("pod spec");
    let inits = spec.init_containers.as_deref().unwrap_or_default();
    if inits.is_empty() {
        return (None, None, true);
    }
    // A running app container means initialization happened before.
    if spec.containers.iter().any(|c| {
        rt.latest(&c.name)
            .is_some_and(|s| s.state == State::Running)
    }) {
        return (None, None, true);
    }
    for (i, c) in inits.iter().enumerate().rev() {
        if let Some(s) = rt.latest(&c.name)
            && init_failed(s)
        {
            return (Some(s), Some(i), false);
        }
    }
    for (i, c) in inits.iter().enumerate().rev() {
        let Some(s) = rt.latest(&c.name) else {
            continue;
        };
        match s.state {
            State::Running => return (None, None, false),
            State::Exited if i == inits.len() - 1 => return (None, None, true),
            State::Exited => return (None, Some(i + 1), false),
            _ => {}
        }
    }
    (None, Some(0), false)
}

/// Upstream's podSandboxChanged: (create a new sandbox?, its attempt, the current sandbox).
fn sandbox_changed(pod: &Pod, rt: &RuntimePod) -> (bool, u32, Option<String>) {
    let Some(latest) = rt.sandboxes.first() else {
        return (true, 0, None);
    };
    let ready = rt.sandboxes.iter().filter(|s| s.ready).count();
    if ready > 1 || !latest.ready {
        return (true, latest.attempt + 1, Some(latest.id.clone()));
    }
    if !host_network(pod) && latest.ip.is_none() {
        return (true, latest.attempt + 1, Some(latest.id.clone()));
    }
    (false, latest.attempt, Some(latest.id.clone()))
}

fn succeeded(c: &Container, rt: &RuntimePod) -> bool {
    rt.latest(&c.name)
        .is_some_and(|s| s.state == State::Exited && s.exit_code == 0)
}

/// Upstream's EphemeralContainersToStart: those the runtime has never seen, since they run
/// once whatever the restart policy (an exited one stays exited, in this sandbox or the next).
/// They go only into a sandbox that stays, and may start while init containers still run.
fn ephemeral_to_start(pod: &Pod, rt: &RuntimePod, a: &Actions) -> Vec<usize> {
    let keeps_sandbox = a.create_sandbox.is_none() && !a.kill_pod && a.sandbox_id.is_some();
    if !keeps_sandbox || pod.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    let spec = pod.spec.as_ref().expect("pod spec");
    spec.ephemeral_containers
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, e)| rt.latest(&e.name).is_none())
        .map(|(i, _)| i)
        .collect()
}

/// The next steps for `pod`. `hashes[i]` is the hash of `spec.containers[i]`; a running
/// container started from another definition is replaced. `unhealthy` holds containers whose
/// liveness or startup probe failed.
pub fn compute(
    pod: &Pod,
    rt: &RuntimePod,
    hashes: &[String],
    unhealthy: &HashSet<String>,
) -> Actions {
    let mut a = compute_containers(pod, rt, hashes, unhealthy);
    a.start_ephemeral = ephemeral_to_start(pod, rt, &a);
    a
}

/// Everything but the ephemeral containers.
fn compute_containers(
    pod: &Pod,
    rt: &RuntimePod,
    hashes: &[String],
    unhealthy: &HashSet<String>,
) -> Actions {
    let spec = pod.spec.as_ref().expect("pod spec");
    let (create, attempt, sandbox_id) = sandbox_changed(pod, rt);
    let mut a = Actions {
        kill_pod: create && (!rt.sandboxes.is_empty() || !rt.containers.is_empty()),
        sandbox_id,
        ..Default::default()
    };
    let has_inits = spec.init_containers.as_ref().is_some_and(|i| !i.is_empty());
    if create {
        if !restarts_on_failure(pod) && attempt != 0 && !rt.containers.is_empty() {
            // A Never pod whose sandbox died after its containers ran is done.
            return a;
        }
        let start: Vec<usize> = spec
            .containers
            .iter()
            .enumerate()
            .filter(|(_, c)| !(restart_policy(pod) == "OnFailure" && succeeded(c, rt)))
            .map(|(i, _)| i)
            .collect();
        if start.is_empty() && !has_inits {
            return a;
        }
        a.create_sandbox = Some(attempt);
        a.sandbox_id = None;
        if has_inits {
            a.next_init = Some(0);
        } else {
            a.start = start;
        }
        return a;
    }
    let (last_failed, next, done) = next_init_container(pod, rt);
    if !done {
        if let Some(next) = next {
            if last_failed.is_some() && !restarts_on_failure(pod) {
                a.kill_pod = true;
            } else {
                if let Some(f) = last_failed.filter(|f| f.state == State::Unknown) {
                    a.kill.push(Kill {
                        id: f.id.clone(),
                        name: f.name.clone(),
                        message: "unknown state".into(),
                    });
                }
                a.next_init = Some(next);
            }
        }
        return a;
    }
    let mut keep = 0;
    for (i, c) in spec.containers.iter().enumerate() {
        let status = rt.latest(&c.name);
        let Some(running) = status.filter(|s| s.state == State::Running) else {
            if should_restart(c, pod, rt) {
                a.start.push(i);
                if let Some(s) = status.filter(|s| s.state == State::Unknown) {
                    a.kill.push(Kill {
                        id: s.id.clone(),
                        name: c.name.clone(),
                        message: "unknown state".into(),
                    });
                }
            }
            continue;
        };
        let mut restart = restarts_on_failure(pod);
        let message = if hashes
            .get(i)
            .is_some_and(|h| !running.hash.is_empty() && *h != running.hash)
        {
            restart = true;
            format!("Container {} definition changed", c.name)
        } else if unhealthy.contains(&running.id) {
            format!("Container {} failed liveness probe", c.name)
        } else {
            keep += 1;
            continue;
        };
        let message = if restart {
            a.start.push(i);
            format!("{message}, will be restarted")
        } else {
            message
        };
        a.kill.push(Kill {
            id: running.id.clone(),
            name: c.name.clone(),
            message,
        });
    }
    if pod.metadata.deletion_timestamp.is_none() && keep == 0 && a.start.is_empty() {
        a.kill_pod = true;
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::model::SandboxState;

    fn pod(policy: &str, inits: &[&str], containers: &[&str]) -> Pod {
        let c = |n: &&str| serde_json::json!({"name": n, "image": "busybox"});
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"restartPolicy": policy,
                     "initContainers": inits.iter().map(c).collect::<Vec<_>>(),
                     "containers": containers.iter().map(c).collect::<Vec<_>>()}
        }))
        .unwrap()
    }

    fn sandbox(ready: bool) -> SandboxState {
        SandboxState {
            id: "s1".into(),
            attempt: 0,
            ready,
            ip: Some("10.244.0.5".into()),
            created_at: 1,
        }
    }

    fn ctr(name: &str, state: State, exit: i32, attempt: u32) -> RuntimeContainer {
        RuntimeContainer {
            id: format!("{name}-{attempt}"),
            name: name.into(),
            attempt,
            state,
            created_at: attempt as i64 + 10,
            started_at: 0,
            finished_at: 0,
            exit_code: exit,
            reason: String::new(),
            message: String::new(),
            image: String::new(),
            image_ref: String::new(),
            hash: String::new(),
            log_path: String::new(),
            sandbox_id: "s1".into(),
            termination_message: None,
        }
    }

    fn rt(sandboxes: Vec<SandboxState>, containers: Vec<RuntimeContainer>) -> RuntimePod {
        RuntimePod {
            uid: "u".into(),
            sandboxes,
            containers,
            ..Default::default()
        }
    }

    #[test]
    fn fresh_pod_creates_sandbox_then_inits_first() {
        let a = compute(
            &pod("Always", &[], &["a", "b"]),
            &rt(vec![], vec![]),
            &[],
            &HashSet::new(),
        );
        assert_eq!(
            (a.create_sandbox, a.start.clone(), a.kill_pod),
            (Some(0), vec![0, 1], false)
        );
        let a = compute(
            &pod("Always", &["i1", "i2"], &["a"]),
            &rt(vec![], vec![]),
            &[],
            &HashSet::new(),
        );
        assert_eq!(
            (a.create_sandbox, a.next_init, a.start.len()),
            (Some(0), Some(0), 0)
        );
    }

    #[test]
    fn init_containers_run_in_order() {
        let p = pod("Always", &["i1", "i2"], &["a"]);
        let running = rt(vec![sandbox(true)], vec![ctr("i1", State::Running, 0, 0)]);
        assert_eq!(
            compute(&p, &running, &[], &HashSet::new()),
            Actions {
                sandbox_id: Some("s1".into()),
                ..Default::default()
            }
        );
        let first_done = rt(vec![sandbox(true)], vec![ctr("i1", State::Exited, 0, 0)]);
        assert_eq!(
            compute(&p, &first_done, &[], &HashSet::new()).next_init,
            Some(1)
        );
        let all_done = rt(
            vec![sandbox(true)],
            vec![
                ctr("i2", State::Exited, 0, 0),
                ctr("i1", State::Exited, 0, 0),
            ],
        );
        assert_eq!(compute(&p, &all_done, &[], &HashSet::new()).start, vec![0]);
        // A failed init container is retried unless the policy is Never, which fails the pod.
        let failed = rt(vec![sandbox(true)], vec![ctr("i1", State::Exited, 1, 0)]);
        assert_eq!(
            compute(&p, &failed, &[], &HashSet::new()).next_init,
            Some(0)
        );
        let never = compute(
            &pod("Never", &["i1"], &["a"]),
            &failed,
            &[],
            &HashSet::new(),
        );
        assert!(never.kill_pod && never.next_init.is_none());
    }

    #[test]
    fn restart_policies() {
        let exited = |code| rt(vec![sandbox(true)], vec![ctr("a", State::Exited, code, 0)]);
        for (policy, code, restarts) in [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 0, false),
            ("OnFailure", 2, true),
            ("Never", 1, false),
        ] {
            let a = compute(
                &pod(policy, &[], &["a"]),
                &exited(code),
                &[],
                &HashSet::new(),
            );
            assert_eq!(a.start == vec![0], restarts, "{policy} exit {code}");
            // Nothing left to run: the sandbox goes too.
            assert_eq!(a.kill_pod, !restarts, "{policy} exit {code}");
        }
    }

    #[test]
    fn liveness_failures_and_spec_changes_restart() {
        let p = pod("Always", &[], &["a"]);
        let mut running = ctr("a", State::Running, 0, 3);
        running.hash = "h1".into();
        let r = rt(vec![sandbox(true)], vec![running]);
        let keep = compute(&p, &r, &["h1".into()], &HashSet::new());
        assert!(keep.start.is_empty() && keep.kill.is_empty() && !keep.kill_pod);
        let unhealthy = compute(&p, &r, &["h1".into()], &HashSet::from(["a-3".to_string()]));
        assert_eq!(unhealthy.start, vec![0]);
        assert_eq!(
            unhealthy.kill[0].message,
            "Container a failed liveness probe, will be restarted"
        );
        let changed = compute(&p, &r, &["h2".into()], &HashSet::new());
        assert_eq!(
            changed.kill[0].message,
            "Container a definition changed, will be restarted"
        );
        // Never: a liveness failure kills without restarting.
        let never = compute(
            &pod("Never", &[], &["a"]),
            &r,
            &["h1".into()],
            &HashSet::from(["a-3".to_string()]),
        );
        assert!(never.start.is_empty() && never.kill.len() == 1 && never.kill_pod);
    }

    #[test]
    fn dead_sandbox_is_replaced() {
        let p = pod("Always", &[], &["a"]);
        let r = rt(vec![sandbox(false)], vec![ctr("a", State::Exited, 137, 1)]);
        let a = compute(&p, &r, &[], &HashSet::new());
        assert!(a.kill_pod);
        assert_eq!((a.create_sandbox, a.start.clone()), (Some(1), vec![0]));
        // A Never pod that already ran is not started again.
        let never = compute(&pod("Never", &[], &["a"]), &r, &[], &HashSet::new());
        assert_eq!(never.create_sandbox, None);
    }

    fn with_ephemeral(mut p: Pod, names: &[&str]) -> Pod {
        p.spec.as_mut().unwrap().ephemeral_containers = Some(
            names
                .iter()
                .map(|n| {
                    serde_json::from_value(serde_json::json!({
                        "name": n, "image": "busybox:1.36", "targetContainerName": "a"
                    }))
                    .unwrap()
                })
                .collect(),
        );
        p
    }

    #[test]
    fn ephemeral_containers_start_once() {
        let p = with_ephemeral(pod("Always", &[], &["a"]), &["dbg", "dbg2"]);
        let running = ctr("a", State::Running, 0, 0);
        let fresh = rt(vec![sandbox(true)], vec![running.clone()]);
        let a = compute(&p, &fresh, &[], &HashSet::new());
        assert_eq!(a.start_ephemeral, vec![0, 1]);
        assert!(a.start.is_empty() && !a.kill_pod);
        // Started, running or exited: never again, whatever the restart policy.
        for state in [
            State::Running,
            State::Exited,
            State::Created,
            State::Unknown,
        ] {
            let r = rt(
                vec![sandbox(true)],
                vec![running.clone(), ctr("dbg", state, 1, 0)],
            );
            let a = compute(&p, &r, &[], &HashSet::new());
            assert_eq!(a.start_ephemeral, vec![1], "{state:?}");
            assert!(a.kill.is_empty(), "{state:?}");
        }
    }

    #[test]
    fn ephemeral_containers_wait_for_a_kept_sandbox() {
        let p = with_ephemeral(pod("Always", &[], &["a"]), &["dbg"]);
        // No sandbox yet, or one being replaced: nothing ephemeral goes in.
        let none = compute(&p, &rt(vec![], vec![]), &[], &HashSet::new());
        assert_eq!(none.create_sandbox, Some(0));
        assert!(none.start_ephemeral.is_empty());
        let dead = rt(vec![sandbox(false)], vec![ctr("a", State::Exited, 137, 0)]);
        let a = compute(&p, &dead, &[], &HashSet::new());
        assert!(a.kill_pod && a.start_ephemeral.is_empty());
        // A terminating pod, or one whose containers are done, starts nothing.
        let live = rt(vec![sandbox(true)], vec![ctr("a", State::Running, 0, 0)]);
        let mut deleting = p.clone();
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        assert!(
            compute(&deleting, &live, &[], &HashSet::new())
                .start_ephemeral
                .is_empty()
        );
        let never = with_ephemeral(pod("Never", &[], &["a"]), &["dbg"]);
        let done = rt(vec![sandbox(true)], vec![ctr("a", State::Exited, 0, 0)]);
        let a = compute(&never, &done, &[], &HashSet::new());
        assert!(a.kill_pod && a.start_ephemeral.is_empty());
        // Initialization still under way does not hold a debugger back (as upstream).
        let init = with_ephemeral(pod("Always", &["i1"], &["a"]), &["dbg"]);
        let initializing = rt(vec![sandbox(true)], vec![ctr("i1", State::Running, 0, 0)]);
        assert_eq!(
            compute(&init, &initializing, &[], &HashSet::new()).start_ephemeral,
            vec![0]
        );
    }
}
